"""Prompt + completion sequences with prompt and completion contiguous in every row.

Prompts are LEFT-padded to a common width P and completions follow at once, right-padded to
width C: row i is [pad..pad, prompt_i, completion_i, pad..pad]. Position ids are
cumsum(attention_mask) - 1, so completion token j of row i sits at position len(prompt_i) + j,
exactly where Hugging Face generate (and vLLM) sampled it, whatever the padding. The logits
that predict completion token j are those of sequence index P - 1 + j, the same for all rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SeqBatch:
    input_ids: torch.Tensor  # (B, P + C)
    attention_mask: torch.Tensor  # (B, P + C)
    position_ids: torch.Tensor  # (B, P + C)
    prompt_width: int  # P
    completion_ids: torch.Tensor  # (B, C)
    completion_mask: torch.Tensor  # (B, C) bool

    def to(self, device) -> "SeqBatch":
        return SeqBatch(self.input_ids.to(device), self.attention_mask.to(device), self.position_ids.to(device),
                        self.prompt_width, self.completion_ids.to(device), self.completion_mask.to(device))

    def predicting_slice(self) -> slice:
        """Sequence indices whose outputs predict the completion tokens."""
        c = self.completion_ids.shape[1]
        return slice(self.prompt_width - 1, self.prompt_width - 1 + c)


def position_ids_from_mask(mask: torch.Tensor) -> torch.Tensor:
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)  # pads get any valid position; they are masked out


def build(prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> SeqBatch:
    assert len(prompts) == len(completions)
    b = len(prompts)
    p = max(len(x) for x in prompts)
    c = max(1, max(len(x) for x in completions))
    ids = torch.full((b, p + c), pad_id, dtype=torch.long)
    mask = torch.zeros((b, p + c), dtype=torch.long)
    comp = torch.full((b, c), pad_id, dtype=torch.long)
    cmask = torch.zeros((b, c), dtype=torch.bool)
    for i, (pr, co) in enumerate(zip(prompts, completions)):
        ids[i, p - len(pr): p] = torch.tensor(pr, dtype=torch.long)
        mask[i, p - len(pr): p] = 1
        if co:
            ids[i, p: p + len(co)] = torch.tensor(co, dtype=torch.long)
            mask[i, p: p + len(co)] = 1
            comp[i, : len(co)] = torch.tensor(co, dtype=torch.long)
            cmask[i, : len(co)] = True
    return SeqBatch(ids, mask, position_ids_from_mask(mask), p, comp, cmask)


def trim_completion(tokens: list[int], stop_ids: set[int], max_len: int) -> list[int]:
    """Cut a sampled completion after its first stop token (kept: the model learns to stop)."""
    out = []
    for t in tokens[:max_len]:
        out.append(int(t))
        if t in stop_ids:
            break
    return out
