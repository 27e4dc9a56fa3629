"""Each whitelisted knob changes what it should, on a real (tiny, random) Qwen3 model in process;
plus the teachers, the untouched base, padding invariance and the chunked loss on the model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from fixtures_tiny import untrained_tiny_model  # noqa: F401  (pytest fixture)

from opsdctl.recipes import knobs
from opsdctl.recipes.profiles import get_profile, with_overrides
from trainer.cli import TrainConfig
from trainer.rollout import (
    HFGenerateBackend,
    RolloutBackend,
    SamplingSpec,
    hf_generate_kwargs,
    vllm_sampling_kwargs,
)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    from opsdkit.tiny import make_rows

    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_rows(40, seed=5)))
    return str(path)


CANNED = [[20, 21, 22, 23, 24, 25], [30, 31, 32]]  # completions of unequal lengths, row by row


class Spy(RolloutBackend):
    """Records what the trainer asks of its sampler; answers with a real backend or fixed tokens
    (one list for every prompt, or a list of lists dealt out in turn)."""

    name = "spy"

    def __init__(self, inner=None, fixed=None):
        self.inner, self.fixed = inner, fixed
        self.calls: list[tuple[list, SamplingSpec]] = []
        self.syncs = 0

    def sync_weights(self, model):
        self.syncs += 1

    def generate(self, prompts, spec):
        self.calls.append((prompts, spec))
        if self.inner is not None:
            return self.inner.generate(prompts, spec)
        if self.fixed and isinstance(self.fixed[0], list):
            return [list(self.fixed[i % len(self.fixed)]) for i in range(len(prompts))]
        return [list(self.fixed) for _ in prompts]


@pytest.fixture
def make(tmp_path, untrained_tiny_model, data_file):  # noqa: F811
    from trainer.train import OPSDTrainer

    def _make(hp=None, method=None, *, steps=2, batch=2, accum=1, backend=None, seed=0):
        hparams = {**knobs.default_hparams(), "max_completion_length": 6, "lora_r": 4, "lora_alpha": 8, **(hp or {})}
        knobs.check_invariants(hparams, "test")
        prof = with_overrides(get_profile("tiny"), model=str(untrained_tiny_model), dataset=data_file,
                              max_steps=steps, per_device_train_batch_size=batch, gradient_accumulation_steps=accum,
                              save_steps=steps, learning_rate_scale=1.0)  # the recipe's own lr, unscaled
        cfg = TrainConfig(profile=prof, hparams=hparams, method={**knobs.default_method(), **(method or {})},
                          seed=seed, output_dir=tmp_path / "out", loss_chunk_size=7)
        return OPSDTrainer(cfg, backend=backend or Spy(fixed=CANNED))  # canned rollouts: fast, deterministic

    return _make


def lora_params(tr, kind):
    return {n: p.detach().clone() for n, p in tr.model.named_parameters() if f"{kind}.default" in n}


def base_params(tr):
    return {n: p.detach().clone() for n, p in tr.model.named_parameters() if "lora_" not in n}


def test_a_finished_run_ends_accelerates_training(make, monkeypatch):
    # accelerate's teardown destroys the process group: left to the interpreter's exit, gloo's
    # threads aborted a finished two-process run
    tr = make(steps=1)
    ended = []
    monkeypatch.setattr(tr.acc, "end_training", lambda: ended.append(True))
    result = tr.train()
    assert ended == [True] and result["checkpoints"] == ["checkpoint-1", "checkpoint-final"]


# --- optimisation knobs -------------------------------------------------------------------------


def test_learning_rate_scales_the_update(make):
    deltas = []
    for lr in (1e-3, 2e-3):
        tr = make({"learning_rate": lr, "max_grad_norm": 0.0})
        before = lora_params(tr, "lora_B")
        tr.train_step(1)
        after = lora_params(tr, "lora_B")
        deltas.append(torch.cat([(after[n] - before[n]).flatten() for n in before]))
    assert deltas[0].abs().sum() > 0
    torch.testing.assert_close(deltas[1], 2 * deltas[0], rtol=1e-3, atol=1e-9)  # Adam's first step: lr * sign


def test_weight_decay_shrinks_weights(make):
    # LoRA B starts at 0, so A gets no gradient on step 1: only AdamW's decoupled decay moves it
    for wd in (0.0, 0.5):
        tr = make({"learning_rate": 1e-2, "weight_decay": wd})
        before = lora_params(tr, "lora_A")
        tr.train_step(1)
        after = lora_params(tr, "lora_A")
        for n in before:
            torch.testing.assert_close(after[n], before[n] * (1 - 1e-2 * wd), rtol=1e-6, atol=1e-9)


def test_max_grad_norm_clips(make):
    tr = make({"max_grad_norm": 1e-4})
    rec = tr.train_step(1)
    assert rec["grad_norm"] > 1e-4 and math.isclose(rec["grad_norm_clipped"], 1e-4, rel_tol=1e-3)
    tr = make({"max_grad_norm": 0.0})
    rec = tr.train_step(1)
    assert math.isclose(rec["grad_norm_clipped"], rec["grad_norm"], rel_tol=1e-6)


def test_lora_knobs_reach_peft(make):
    tr = make({"lora_r": 4, "lora_alpha": 12, "lora_dropout": 0.25})
    layers = [m for m in tr.model.modules() if hasattr(m, "lora_A") and "default" in m.lora_A]
    names = {n.rsplit(".", 1)[-1] for n, m in tr.model.named_modules() if m in layers}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    for m in layers:
        # dropout disabled as the release does (knobs refuse lora_dropout != 0; the trainer enforces it)
        assert m.r["default"] == 4 and m.scaling["default"] == 3.0 and m.lora_dropout["default"].p == 0.0
    n4 = sum(p.numel() for p in tr.params)
    assert n4 == sum(4 * (m.in_features + m.out_features) for m in layers)
    assert sum(p.numel() for p in make({"lora_r": 8}).params) == 2 * n4


# --- sampling knobs --------------------------------------------------------------------------------


def test_sampling_knobs_reach_the_sampler(make):
    hp = {"temperature": 0.7, "top_p": 0.8, "top_k": 5, "max_completion_length": 5}
    spy = Spy(fixed=[7, 8, 9])
    tr = make(hp, backend=spy)
    tr.prepare(1, tr._my_rows())
    (_, spec), = spy.calls
    assert (spec.temperature, spec.top_p, spec.top_k, spec.max_new_tokens) == (0.7, 0.8, 5, 5)
    kw = hf_generate_kwargs(spec, [1, 2], 0)
    assert (kw["temperature"], kw["top_p"], kw["top_k"], kw["max_new_tokens"]) == (0.7, 0.8, 5, 5)
    assert hf_generate_kwargs(SamplingSpec(1.0, 1.0, -1, 3), [1], 0)["top_k"] == 0  # -1 = off
    vk = vllm_sampling_kwargs(spec, [1, 2])
    assert (vk["temperature"], vk["top_p"], vk["top_k"], vk["max_tokens"]) == (0.7, 0.8, 5, 5)
    assert vllm_sampling_kwargs(SamplingSpec(1.0, 1.0, 0, 3), [1])["top_k"] == -1  # vLLM's off


def test_hf_sampler_obeys_top_k_and_length(make):
    tr = make()
    hf = HFGenerateBackend(tr.model, tr.stop_ids, tr.pad_id)
    prompts = [[5, 6, 7, 8], [9, 10]]
    greedy = [hf.generate(prompts, SamplingSpec(5.0, 1.0, 1, 4, seed=s)) for s in (1, 2)]
    assert greedy[0] == greedy[1] and all(len(c) <= 4 for c in greedy[0])  # top_k=1: no randomness left
    hot = [hf.generate(prompts, SamplingSpec(5.0, 1.0, 0, 4, seed=s)) for s in (1, 2)]
    assert hot[0] != hot[1]
    assert hf.generate(prompts, SamplingSpec(5.0, 1.0, 0, 4, seed=1)) == hot[0]  # seeded
    forced = hf.generate(prompts, SamplingSpec(1.0, 1.0, 0, 3, min_new_tokens=3, seed=1))
    assert [len(c) for c in forced] == [3, 3]


def test_reason_first_samples_an_analysis_before_the_rollouts(make):
    for reason_first in (False, True):
        spy = Spy(fixed=None)
        tr = make({"reason_first": reason_first}, backend=spy)
        spy.fixed = tr.tokenizer("ANALYSIS 42", add_special_tokens=False)["input_ids"]
        batches, _ = tr.prepare(1, tr._my_rows())
        assert len(spy.calls) == 1 + int(reason_first)
        teacher = batches[0].teacher[0]
        assert isinstance(teacher, tuple) is reason_first
        text = tr.tokenizer.decode(sum(teacher, []) if reason_first else teacher)
        assert ("ANALYSIS 42" in text) is reason_first
    (request, analysis_spec), (student, rollout_spec) = spy.calls
    assert "=== Reference Reasoning Start ===" in tr.tokenizer.decode(request[0])
    assert "Reference Reasoning" not in tr.tokenizer.decode(student[0])
    assert analysis_spec.max_new_tokens == tr.cfg.rationale_max_tokens == 48  # 4096, capped by the tiny profile
    assert rollout_spec.max_new_tokens == 6


# --- teachers ---------------------------------------------------------------------------------------


def hidden_of(tr, mode=None):
    from trainer.batch import build
    from trainer.model import completion_hidden
    from trainer.teacher import as_teacher

    b = build([[5, 6, 7], [8, 9]], [[10, 11, 12], [13]], tr.pad_id)
    tr.model.eval()
    with torch.no_grad():
        if mode is None:
            return completion_hidden(tr.model, b)
        with as_teacher(tr.model, mode):
            return completion_hidden(tr.model, b)


def test_fixed_teacher_is_the_untouched_base(make, untrained_tiny_model):  # noqa: F811
    from opsdkit.modeling import load_model

    tr = make({"learning_rate": 5e-2})
    before = base_params(tr)
    for step in (1, 2):
        tr.train_step(step)
    after = base_params(tr)
    assert before.keys() == after.keys() and len(before) > 10
    assert all(torch.equal(before[n], after[n]) for n in before)  # bitwise
    from trainer.batch import build

    b = build([[5, 6, 7], [8, 9]], [[10, 11, 12], [13]], tr.pad_id)
    base = load_model(str(untrained_tiny_model))
    with torch.no_grad():
        plain = base.model(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids)
    want = plain.last_hidden_state[:, b.predicting_slice()][b.completion_mask]
    torch.testing.assert_close(hidden_of(tr, "fixed"), want)
    assert not torch.allclose(hidden_of(tr), want)  # the student has moved
    torch.testing.assert_close(hidden_of(tr, "current"), hidden_of(tr))


def test_vllm_weight_sync_is_out_of_place(make):
    from trainer.rollout import vllm_weights

    tr = make()
    with torch.no_grad():
        for p in tr.params:
            p.normal_(0, 0.1)  # a non-trivial adapter
    before = base_params(tr)
    weights = dict(vllm_weights(tr.model))
    assert all(torch.equal(before[n], p) for n, p in base_params(tr).items())
    layer = tr.model.base_model.model.model.layers[0].self_attn.q_proj
    w = layer.base_layer.weight
    want = w + layer.scaling["default"] * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    torch.testing.assert_close(weights["model.layers.0.self_attn.q_proj.weight"], want)
    assert "model.embed_tokens.weight" in weights and "model.norm.weight" in weights
    assert not any("lora_" in k or "base_layer" in k for k in weights)


def test_ema_teacher_tracks_the_student(make):
    from trainer.teacher import EMA, STUDENT, lora_pairs

    tr = make({"use_ema_teacher": True, "fixed_teacher": False, "ema_decay": 0.75, "learning_rate": 1e-2})
    assert tr.teacher == "ema"
    for step in (1, 2):
        tr.train_step(step)
    assert not torch.allclose(hidden_of(tr, "ema"), hidden_of(tr))
    assert not torch.allclose(hidden_of(tr, "ema"), hidden_of(tr, "fixed"))
    # the student adapter is active and trainable again, the EMA one frozen
    assert tr.model.active_adapter == STUDENT and all(p.requires_grad for p in tr.params)
    assert not any(e.requires_grad for e, _ in lora_pairs(tr.model, EMA, STUDENT))


# --- contiguity, padding, chunking on the model ---------------------------------------------------------


def per_token_losses(tr, prompts_s, prompts_t, completions):
    from trainer.batch import build
    from trainer.loss import position_losses
    from trainer.model import backbone_and_head, completion_hidden
    from trainer.teacher import as_teacher

    s = build(prompts_s, completions, tr.pad_id)
    t = build(prompts_t, completions, tr.pad_id)
    tr.model.eval()
    with torch.no_grad():
        with as_teacher(tr.model, "fixed"):
            ht = completion_hidden(tr.model, t)
        hs = completion_hidden(tr.model, s)
        _, head = backbone_and_head(tr.model)
        tokens = s.completion_ids[s.completion_mask]
        return position_losses(head(hs), head(ht), tokens, tr.loss_spec)[0]


def test_padding_invariance(make):
    tr = make({"jsd_token_clip": 0.0})
    with torch.no_grad():
        for p in tr.params:
            p.normal_(0, 0.2)
    row = ([5, 6, 7], [20, 21, 22, 23, 24], [30, 31, 32])
    others = [([8] * 9, [25] * 2, [33] * 7), ([9, 10], [26] * 12, [34])]
    alone = per_token_losses(tr, [row[0]], [row[1]], [row[2]])
    batch = per_token_losses(tr, [o[0] for o in others[:1]] + [row[0]] + [others[1][0]],
                             [others[0][1], row[1], others[1][1]], [others[0][2], row[2], others[1][2]])
    torch.testing.assert_close(batch[7:10], alone, rtol=1e-4, atol=1e-6)  # row 2 after 7 tokens of row 1
    assert alone.abs().sum() > 0


def test_training_positions_match_generation(make):
    """A completion token's log-prob in the training forward equals the one generate sampled with."""
    tr = make()
    from trainer.batch import build
    from trainer.model import backbone_and_head, completion_hidden

    prompts = [[5, 6, 7, 8, 9, 10], [11, 12]]
    tr.model.eval()
    with torch.no_grad():
        b = build(prompts, [[] for _ in prompts], tr.pad_id)
        gen = tr.model.generate(input_ids=b.input_ids[:, : b.prompt_width], attention_mask=b.attention_mask[:, : b.prompt_width],
                                do_sample=False, max_new_tokens=4, min_new_tokens=4, output_logits=True,
                                return_dict_in_generate=True, pad_token_id=tr.pad_id, eos_token_id=tr.stop_ids)
        comps = gen.sequences[:, b.prompt_width:].tolist()
        sb = build(prompts, comps, tr.pad_id)
        _, head = backbone_and_head(tr.model)
        logits = head(completion_hidden(tr.model, sb)).view(2, 4, -1)
    scores = torch.stack(gen.logits, 1)  # (B, 4, V) the raw logits generate sampled from
    torch.testing.assert_close(logits, scores, rtol=1e-4, atol=1e-4)


def test_chunked_loss_matches_full_logits_on_the_model(make):
    from trainer.batch import build
    from trainer.loss import chunked_loss, naive_loss
    from trainer.model import backbone_and_head, completion_hidden, full_logits
    from trainer.teacher import as_teacher

    tr = make({"beta": 0.5})
    with torch.no_grad():
        for p in tr.params:
            p.normal_(0, 0.1)
    s = build([[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14, 15]], tr.pad_id)
    t = build([[5, 6, 7, 40, 41], [8, 9, 42]], [[10, 11, 12, 13], [14, 15]], tr.pad_id)
    tokens = s.completion_ids[s.completion_mask]
    with as_teacher(tr.model, "fixed"):
        ht = completion_hidden(tr.model, t)
        t_logits = full_logits(tr.model, t)[:, t.predicting_slice()][t.completion_mask]
    tr.model.train()
    _, head = backbone_and_head(tr.model)
    ch = chunked_loss(completion_hidden(tr.model, s), ht, head, tokens, tr.loss_spec, normalizer=6, chunk_size=2)
    g1 = torch.autograd.grad(ch.loss, tr.params)
    s_logits = full_logits(tr.model, s)[:, s.predicting_slice()][s.completion_mask]
    nv = naive_loss(s_logits, t_logits, tokens, tr.loss_spec, normalizer=6)
    g2 = torch.autograd.grad(nv.loss, tr.params)
    torch.testing.assert_close(ch.loss, nv.loss)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_token_weighting_makes_accumulation_match_one_big_batch(make):
    """loss_weighting = token with pad_side = left: 2 micro-batches of 1 row (6 and 3 tokens) give
    the update of 1 batch of 2 rows: the loss is normalised by the step's completion tokens, not per
    micro-batch, and contiguous prompts make a row's positions independent of its batch."""
    results = []
    for batch, accum in ((2, 1), (1, 2)):
        tr = make({"max_grad_norm": 0.0, "learning_rate": 1e-3}, {"loss_weighting": "token", "pad_side": "left"},
                  batch=batch, accum=accum)
        rec = tr.train_step(1)
        results.append((rec, lora_params(tr, "lora_B")))
    (r1, p1), (r2, p2) = results
    assert math.isclose(r1["loss"], r2["loss"], rel_tol=1e-3) and math.isclose(r1["grad_norm"], r2["grad_norm"], rel_tol=1e-4)
    for n in p1:  # Adam's first step is ~lr * sign(g): allow 0.2% of lr where g is ~0
        torch.testing.assert_close(p1[n], p2[n], rtol=1e-4, atol=2e-6)
