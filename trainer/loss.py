"""The OPSD loss: pure functions of tensors.

Per completion position n, with student logits s_n and teacher logits t_n over the vocabulary,
both divided by the temperature T:
    log p_S = log_softmax(s_n / T),  log p_T = log_softmax(t_n / T)

Generalized JSD (TRL's convention, which the released recipe uses):
    beta = 0:  d_v = p_T,v (log p_T,v - log p_S,v)                  (forward KL(T||S))
    beta = 1:  d_v = p_S,v (log p_S,v - log p_T,v)                  (reverse KL(S||T))
    else:      m = beta p_T + (1 - beta) p_S
               d_v = beta p_T,v (log p_T,v - log m_v) + (1 - beta) p_S,v (log p_S,v - log m_v)
(as in TRL, the mixture form tends to 0, not to a KL, as beta -> 0 or 1: the ends are special cases.)

top_k_loss = k > 0: both distributions are restricted to the teacher's k most likely tokens and
renormalised there (log_softmax over the k gathered logits) before d_v is taken.

jsd_token_clip = tau > 0 (0 = off), method knob clip_mode:
    entry: loss_n = sum_v min(d_v, tau)          (released: each vocabulary term clamped at tau)
    token: D_n = sum_v d_v; loss_n = D_n * min(1, tau / stopgrad(D_n))
           (the position's total is capped at tau; its gradient keeps its direction, scaled down)
A position counts as clipped when some d_v > tau (entry) or D_n > tau (token).

use_tinker_loss (sampled-token objective, replaces the divergence; beta/top_k_loss/clip unused):
    A_n = stopgrad(log p_T(y_n) - log p_S(y_n));  loss_n = -A_n log p_S(y_n)
its gradient is the policy gradient of E[log p_T - log p_S], i.e. of -KL(S||T) on samples.

The reported `kl` is always the full-vocabulary KL(T||S) at temperature T, detached.
A micro-batch's training loss is sum_n loss_n / normalizer, the normalizer from
`micro_batch_normalizer` (method knob loss_weighting; gradients are then averaged over processes):
    micro_batch (released): N_mb x G       (N_mb its own completion tokens, G accumulation steps)
        step objective = mean over processes and micro-batches of each micro-batch's token mean
        (opsd_trainer.py generalized_jsd_loss divides by its mask's sum; the HF Trainer divides
        by G; DDP averages processes): every micro-batch weighs the same, whatever its length;
    token: N_step / P                       (N_step the step's tokens over all P processes)
        step objective = the mean over every completion token of the step.

Memory: `chunked_loss` never holds full-vocabulary logits for all positions at once: it takes
hidden states of the completion positions only and, chunk by chunk under activation
checkpointing, applies the output head and the divergence; backward recomputes one chunk at a
time. `naive_loss` is the full-materialisation reference, for tests and the benchmark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DEFAULT_CHUNK_SIZE = 512  # positions per chunk: 512 x 151,936 fp32 = 311 MB per live tensor


@dataclass(frozen=True)
class LossSpec:
    beta: float = 0.0
    temperature: float = 1.0
    jsd_token_clip: float = 0.0  # tau; 0 = off
    clip_mode: str = "entry"  # entry | token
    top_k_loss: int = 0  # 0 = full vocabulary
    use_tinker_loss: bool = False

    @classmethod
    def from_knobs(cls, hparams: dict, method: dict) -> "LossSpec":
        return cls(beta=hparams["beta"], temperature=hparams["temperature"],
                   jsd_token_clip=hparams["jsd_token_clip"], clip_mode=method["clip_mode"],
                   top_k_loss=hparams["top_k_loss"], use_tinker_loss=hparams["use_tinker_loss"])


def divergence_terms(student_logp: torch.Tensor, teacher_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-vocabulary-entry generalized JSD terms d_v (same shape as the inputs)."""
    if beta == 0.0:
        return teacher_logp.exp() * (teacher_logp - student_logp)
    if beta == 1.0:
        return student_logp.exp() * (student_logp - teacher_logp)
    mix = torch.logsumexp(torch.stack([student_logp + math.log1p(-beta), teacher_logp + math.log(beta)]), dim=0)
    return (beta * teacher_logp.exp() * (teacher_logp - mix)
            + (1.0 - beta) * student_logp.exp() * (student_logp - mix))


def clip_terms(terms: torch.Tensor, tau: float, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-position loss, per-position clipped flag) from the (N, V) terms."""
    if tau <= 0:
        return terms.sum(-1), torch.zeros(terms.shape[:-1], dtype=torch.bool, device=terms.device)
    if mode == "entry":
        return terms.clamp(max=tau).sum(-1), (terms > tau).any(-1)
    if mode == "token":
        total = terms.sum(-1)
        over = total > tau
        scale = torch.where(over, tau / total.detach().clamp(min=tau), torch.ones_like(total))
        return total * scale, over
    raise ValueError(f"clip_mode {mode!r}: must be entry or token")


def position_losses(student_logits: torch.Tensor, teacher_logits: torch.Tensor, tokens: torch.Tensor,
                    spec: LossSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss_n, kl_n, clipped_n) for N positions; logits (N, V), tokens (N,) the completion tokens.

    Computed in fp32 (or the inputs' dtype if wider); only loss_n carries gradient.
    """
    dtype = torch.promote_types(student_logits.dtype, torch.float32)
    s = student_logits.to(dtype) / spec.temperature
    t = teacher_logits.detach().to(dtype) / spec.temperature
    s_logp = F.log_softmax(s, dim=-1)
    t_logp = F.log_softmax(t, dim=-1)
    with torch.no_grad():
        kl = (t_logp.exp() * (t_logp - s_logp)).sum(-1)
    if spec.use_tinker_loss:
        s_tok = s_logp.gather(-1, tokens[:, None]).squeeze(-1)
        t_tok = t_logp.gather(-1, tokens[:, None]).squeeze(-1)
        advantage = (t_tok - s_tok).detach()
        return -advantage * s_tok, kl, torch.zeros_like(kl, dtype=torch.bool)
    if spec.top_k_loss > 0 and spec.top_k_loss < s.shape[-1]:
        idx = t.topk(spec.top_k_loss, dim=-1).indices
        s_logp = F.log_softmax(s.gather(-1, idx), dim=-1)
        t_logp = F.log_softmax(t.gather(-1, idx), dim=-1)
    terms = divergence_terms(s_logp, t_logp, spec.beta)
    loss, clipped = clip_terms(terms, spec.jsd_token_clip, spec.clip_mode)
    return loss, kl, clipped


LOSS_WEIGHTINGS = ("micro_batch", "token")


def micro_batch_normalizer(weighting: str, micro_tokens: int, grad_accum: int, step_tokens: float,
                           processes: int) -> float:
    """What a micro-batch's summed per-position loss is divided by (see the module docstring)."""
    if weighting == "micro_batch":
        return float(max(1, micro_tokens) * grad_accum)
    if weighting == "token":
        return max(1.0, step_tokens / processes)
    raise ValueError(f"loss_weighting {weighting!r}: must be one of {', '.join(LOSS_WEIGHTINGS)}")


@dataclass
class LossOut:
    loss: torch.Tensor  # scalar: sum of loss_n / normalizer (carries gradient)
    loss_sum: float  # sum of loss_n (detached)
    kl_sum: float
    clipped: int
    positions: int


def naive_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, tokens: torch.Tensor,
               spec: LossSpec, normalizer: float | None = None) -> LossOut:
    """Reference: full-vocabulary fp32 tensors for all N positions at once."""
    loss_n, kl_n, clipped_n = position_losses(student_logits, teacher_logits, tokens, spec)
    norm = float(normalizer or max(1, tokens.numel()))
    return LossOut(loss_n.sum() / norm, loss_n.detach().sum().item(), kl_n.sum().item(),
                   int(clipped_n.sum().item()), tokens.numel())


def _chunk(head, spec: LossSpec, h_s: torch.Tensor, h_t: torch.Tensor, tokens: torch.Tensor):
    with torch.no_grad():
        t_logits = head(h_t)
    loss_n, kl_n, clipped_n = position_losses(head(h_s), t_logits, tokens, spec)
    return loss_n.sum(), kl_n.sum(), clipped_n.sum()


def chunked_loss(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, head, tokens: torch.Tensor,
                 spec: LossSpec, normalizer: float | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> LossOut:
    """The same loss from hidden states (N, H) of the completion positions and the output head.

    Each chunk's logits exist only inside its checkpointed function: the forward keeps just the
    chunk's scalar, and backward recomputes the chunk's logits (student and teacher) in turn.
    """
    n = tokens.numel()
    norm = float(normalizer or max(1, n))
    fn = partial(_chunk, head, spec)
    total = student_hidden.new_zeros((), dtype=torch.float32)
    kl_sum = student_hidden.new_zeros((), dtype=torch.float32)
    clipped = torch.zeros((), dtype=torch.long, device=student_hidden.device)
    for i in range(0, n, chunk_size):
        sl = slice(i, i + chunk_size)
        if torch.is_grad_enabled() and student_hidden.requires_grad:
            part, kl, clip = checkpoint(fn, student_hidden[sl], teacher_hidden[sl], tokens[sl], use_reentrant=False)
        else:
            part, kl, clip = fn(student_hidden[sl], teacher_hidden[sl], tokens[sl])
        total = total + part
        kl_sum = kl_sum + kl.detach()
        clipped = clipped + clip
    # one device sync for the statistics, not one per chunk
    return LossOut(total / norm, total.detach().item(), kl_sum.item(), int(clipped.item()), n)
