"""Next-token sampling for the Hugging Face backend: pure functions of tensors.

The order follows vLLM's sampler: presence penalty -> temperature -> min_p -> top_k -> top_p ->
draw. Each row draws with its own torch.Generator, seeded from its work item, so a row's
tokens do not depend on which other rows share its batch (HF `generate` has one global RNG,
which couples rows).
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def apply_presence_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Subtract `penalty` from every token already generated in the row (`seen`: bool, B x V)."""
    if penalty == 0.0:
        return logits
    return logits - penalty * seen.to(logits.dtype)


def filter_logits(logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float,
                  min_p: float) -> torch.Tensor:
    """Scaled logits with the tokens outside min_p / top_k / top_p set to -inf (fp32, B x V)."""
    x = logits.float() / temperature
    if min_p > 0.0:
        probs = torch.softmax(x, dim=-1)
        floor = min_p * probs.max(dim=-1, keepdim=True).values
        x = x.masked_fill(probs < floor, NEG_INF)
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, NEG_INF)
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        cum = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        # Drop a token when the mass before it already reaches top_p (the top token always stays).
        drop_sorted = (cum - torch.softmax(sorted_x, dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, NEG_INF)
    return x


def sample_next(logits: torch.Tensor, generators: list, *, temperature: float, top_k: int, top_p: float,
                min_p: float) -> torch.Tensor:
    """One token per row (LongTensor of shape B); greedy when temperature == 0."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p,
                                        min_p=min_p), dim=-1)
    return torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(generators)])
