"""The OPSD loss (trainer/loss.py) against direct float64 computations, TRL's generalized JSD,
and between its chunked and naive implementations."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.loss import LossSpec, chunked_loss, naive_loss, position_losses

torch.set_num_threads(1)
N, V = 6, 11


def logits(seed: int, n: int = N, v: int = V, scale: float = 3.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, v, generator=g, dtype=torch.float64) * scale).to(dtype)


def f64_probs(x, temperature):
    return torch.softmax(x.double() / temperature, -1)


def direct_terms(s, t, beta, temperature):
    """Per-entry generalized JSD in float64, written from the definitions."""
    p, q = f64_probs(s, temperature), f64_probs(t, temperature)  # student, teacher
    if beta == 0:
        return q * (q.log() - p.log())  # KL(T||S)
    if beta == 1:
        return p * (p.log() - q.log())  # KL(S||T)
    m = beta * q + (1 - beta) * p
    return beta * q * (q.log() - m.log()) + (1 - beta) * p * (p.log() - m.log())


TOKENS = torch.arange(N) % V


@pytest.mark.parametrize("beta", [0.0, 1.0, 0.3, 0.5])
@pytest.mark.parametrize("temperature", [1.0, 1.7])
def test_generalized_jsd_equals_float64(beta, temperature):
    s, t = logits(1), logits(2)
    loss, kl, clipped = position_losses(s, t, TOKENS, LossSpec(beta=beta, temperature=temperature))
    want = direct_terms(s, t, beta, temperature).sum(-1)
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)
    # the reported kl is always KL(T||S), whatever beta
    torch.testing.assert_close(kl.double(), direct_terms(s, t, 0.0, temperature).sum(-1), rtol=1e-5, atol=1e-6)
    assert not clipped.any()


def test_forward_and_reverse_kl_differ_and_temperature_matters():
    s, t = logits(3), logits(4)
    fwd = position_losses(s, t, TOKENS, LossSpec(beta=0.0))[0]
    rev = position_losses(s, t, TOKENS, LossSpec(beta=1.0))[0]
    hot = position_losses(s, t, TOKENS, LossSpec(beta=0.0, temperature=2.0))[0]
    assert not torch.allclose(fwd, rev) and not torch.allclose(fwd, hot)
    # the teacher's probabilities weight the forward KL: swapping roles gives the reverse one
    torch.testing.assert_close(position_losses(t, s, TOKENS, LossSpec(beta=1.0))[0], fwd)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_matches_trl_generalized_jsd(beta):
    gkd = pytest.importorskip("trl.experimental.gkd.gkd_trainer")
    s, t = logits(5), logits(6)
    ours = position_losses(s, t, TOKENS, LossSpec(beta=beta, temperature=1.3))[0].sum()
    theirs = gkd.GKDTrainer.generalized_jsd_loss(s[None], t[None], beta=beta, temperature=1.3, reduction="sum")
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_entry_clip_clamps_each_vocabulary_term(beta):
    s, t = logits(7), logits(8)
    tau = 0.05
    loss, _, clipped = position_losses(s, t, TOKENS, LossSpec(beta=beta, jsd_token_clip=tau, clip_mode="entry"))
    terms = direct_terms(s, t, beta, 1.0)
    torch.testing.assert_close(loss.double(), terms.clamp(max=tau).sum(-1), rtol=1e-5, atol=1e-6)
    assert torch.equal(clipped, (terms > tau).any(-1))
    assert clipped.any()


def test_token_clip_caps_total_and_keeps_gradient_direction():
    s, t = logits(9), logits(10)
    tau = 5.0  # some positions above, some below
    s_leaf = s.clone().requires_grad_(True)
    loss, _, clipped = position_losses(s_leaf, t, TOKENS, LossSpec(jsd_token_clip=tau, clip_mode="token"))
    total = direct_terms(s, t, 0.0, 1.0).sum(-1)
    torch.testing.assert_close(loss.double(), total.clamp(max=tau), rtol=1e-5, atol=1e-6)
    assert torch.equal(clipped, total > tau) and clipped.any() and not clipped.all()
    # gradient of each position = min(1, tau / D) * gradient of the unclipped divergence D
    (g_clip,) = torch.autograd.grad(loss.sum(), s_leaf)
    s2 = s.clone().requires_grad_(True)
    (g_full,) = torch.autograd.grad(position_losses(s2, t, TOKENS, LossSpec())[0].sum(), s2)
    scale = torch.where(total > tau, tau / total, torch.ones_like(total)).float()
    torch.testing.assert_close(g_clip, g_full * scale[:, None], rtol=1e-4, atol=1e-7)


def test_clip_modes_differ_and_tau_zero_is_off():
    s, t = logits(11), logits(12)
    entry = position_losses(s, t, TOKENS, LossSpec(jsd_token_clip=0.05, clip_mode="entry"))[0]
    token = position_losses(s, t, TOKENS, LossSpec(jsd_token_clip=0.05, clip_mode="token"))[0]
    off = position_losses(s, t, TOKENS, LossSpec(jsd_token_clip=0.0, clip_mode="entry"))[0]
    assert not torch.allclose(entry, token)
    torch.testing.assert_close(off, position_losses(s, t, TOKENS, LossSpec())[0])
    assert (token <= 0.05 + 1e-6).all()


def test_top_k_loss_restricts_to_teacher_top_k():
    s, t = logits(13), logits(14)
    k = 3
    loss = position_losses(s, t, TOKENS, LossSpec(top_k_loss=k))[0]
    idx = t.topk(k, -1).indices
    want = direct_terms(s.gather(-1, idx), t.gather(-1, idx), 0.0, 1.0).sum(-1)  # renormalised over the k
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(loss, position_losses(s, t, TOKENS, LossSpec())[0])
    torch.testing.assert_close(position_losses(s, t, TOKENS, LossSpec(top_k_loss=V))[0],
                               position_losses(s, t, TOKENS, LossSpec())[0])


def test_tinker_loss_is_advantage_weighted_sampled_token():
    s, t = logits(15), logits(16)
    s_leaf = s.clone().requires_grad_(True)
    spec = LossSpec(use_tinker_loss=True, temperature=1.1, jsd_token_clip=0.05)
    loss, _, clipped = position_losses(s_leaf, t, TOKENS, spec)
    lp_s = torch.log_softmax(s.double() / 1.1, -1).gather(-1, TOKENS[:, None]).squeeze(-1)
    lp_t = torch.log_softmax(t.double() / 1.1, -1).gather(-1, TOKENS[:, None]).squeeze(-1)
    torch.testing.assert_close(loss.double(), -(lp_t - lp_s) * lp_s, rtol=1e-5, atol=1e-6)
    assert not clipped.any()
    # the advantage is detached: d loss / d log pS(y) = -A, not -A + log pS(y)
    (g,) = torch.autograd.grad(loss.sum(), s_leaf)
    p = torch.softmax(s.double() / 1.1, -1)
    onehot = torch.nn.functional.one_hot(TOKENS, V).double()
    want = (-(lp_t - lp_s))[:, None] * (onehot - p) / 1.1
    torch.testing.assert_close(g.double(), want, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(loss, position_losses(s, t, TOKENS, LossSpec())[0])


@pytest.mark.parametrize("spec", [LossSpec(), LossSpec(beta=0.5, jsd_token_clip=0.05, clip_mode="token"),
                                  LossSpec(beta=1.0, jsd_token_clip=0.05, top_k_loss=4, temperature=1.1),
                                  LossSpec(use_tinker_loss=True)])
def test_chunked_equals_naive_values_and_gradients(spec):
    torch.manual_seed(0)
    n, h, v = 37, 8, 19
    head = torch.nn.Linear(h, v, bias=False)
    hs = torch.randn(n, h, requires_grad=True)
    ht = torch.randn(n, h)
    tokens = torch.randint(0, v, (n,))
    naive = naive_loss(head(hs), head(ht), tokens, spec, normalizer=50)
    (g_naive,) = torch.autograd.grad(naive.loss, hs)
    for chunk in (1, 5, 64):
        ch = chunked_loss(hs, ht, head, tokens, spec, normalizer=50, chunk_size=chunk)
        (g_chunk,) = torch.autograd.grad(ch.loss, hs)
        torch.testing.assert_close(ch.loss, naive.loss, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(g_chunk, g_naive, rtol=1e-5, atol=1e-7)
        assert math.isclose(ch.kl_sum, naive.kl_sum, rel_tol=1e-5)
        assert ch.clipped == naive.clipped and ch.positions == naive.positions == n


def test_loss_spec_reads_every_loss_knob():
    from opsdctl.recipes import knobs
    hp = {**knobs.default_hparams(), "beta": 0.25, "temperature": 0.9, "jsd_token_clip": 0.1,
          "top_k_loss": 7, "use_tinker_loss": True}
    spec = LossSpec.from_knobs(hp, {**knobs.default_method(), "clip_mode": "token"})
    assert spec == LossSpec(beta=0.25, temperature=0.9, jsd_token_clip=0.1, clip_mode="token", top_k_loss=7,
                            use_tinker_loss=True)


def saved_bytes(fn) -> int:
    """Bytes of the tensors autograd keeps for backward while `fn` runs its forward."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_chunked_loss_keeps_no_full_vocabulary_tensor_for_backward():
    torch.manual_seed(0)
    n, h, v = 256, 16, 2048
    head = torch.nn.Linear(h, v, bias=False)
    hs = torch.randn(n, h, requires_grad=True)
    ht = torch.randn(n, h)
    tokens = torch.randint(0, v, (n,))
    spec = LossSpec(jsd_token_clip=0.05)
    full = n * v * 4  # one fp32 (positions x vocabulary) tensor
    naive = saved_bytes(lambda: naive_loss(head(hs), head(ht), tokens, spec))
    chunked = saved_bytes(lambda: chunked_loss(hs, ht, head, tokens, spec, chunk_size=32))
    assert naive > 3 * full  # logits, log-probs, probabilities... all positions at once
    assert chunked < 0.1 * full  # only each chunk's hidden-state inputs; logits are recomputed per chunk
