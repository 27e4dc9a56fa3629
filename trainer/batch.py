"""Prompt + completion sequences for the training forward, in one of two layouts (pad_side).

right (released, data_collator.py + opsd_trainer.py training_step): prompts are RIGHT-padded to
    the micro-batch's widest P and the completion follows the pads: row i is
    [prompt_i, pad..pad, completion_i, pad..pad]. Position ids run 0..L-1 over the pads (the
    release passes none, so the model counts them), so completion token j sits at P + j whatever
    the row's prompt length. A prompt made of several pieces (reason_first's teacher) is padded
    piece by piece, as the release concatenates padded tensors.
left (ours): prompts LEFT-padded, completions right after them: [pad..pad, prompt_i,
    completion_i, pad..pad], position ids cumsum(attention_mask) - 1, so completion token j sits
    at len(prompt_i) + j, where generate sampled it.

In both, every token equal to the pad id gets attention mask 0, and a completion token equal to
it is left out of the loss (opsd_trainer.py: `labels[labels == pad_token_id] = -100`; Qwen3's
pad `<|endoftext|>` is also one of its stop tokens). The logits that predict completion token j
are those of sequence index P - 1 + j, the same for all rows.
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


def build(prompts: list, completions: list[list[int]], pad_id: int, pad_side: str = "left") -> SeqBatch:
    """prompts: per row a token list, or a tuple of token-list pieces (padded piece by piece when
    pad_side is right, joined when left)."""
    assert len(prompts) == len(completions)
    pieces = [p if isinstance(p, tuple) else (p,) for p in prompts]
    b = len(pieces)
    c = max(1, max(len(x) for x in completions))
    if pad_side == "right":
        widths = [max(len(row[k]) for row in pieces) for k in range(len(pieces[0]))]
    elif pad_side == "left":
        pieces = [(sum((list(x) for x in row), []),) for row in pieces]
        widths = [max(len(row[0]) for row in pieces)]
    else:
        raise ValueError(f"pad_side {pad_side!r}: must be right or left")
    p = sum(widths)
    ids = torch.full((b, p + c), pad_id, dtype=torch.long)
    real = torch.zeros((b, p + c), dtype=torch.bool)
    comp = torch.full((b, c), pad_id, dtype=torch.long)
    for i, (row, co) in enumerate(zip(pieces, completions)):
        offset = 0
        for width, piece in zip(widths, row):
            start = offset if pad_side == "right" else p - len(piece)
            if piece:
                ids[i, start: start + len(piece)] = torch.tensor(piece, dtype=torch.long)
                real[i, start: start + len(piece)] = True
            offset += width
        if co:
            ids[i, p: p + len(co)] = torch.tensor(co, dtype=torch.long)
            real[i, p: p + len(co)] = True
            comp[i, : len(co)] = torch.tensor(co, dtype=torch.long)
    mask = (real & (ids != pad_id)).long()
    cmask = mask[:, p:].bool()
    if pad_side == "right":
        positions = torch.arange(p + c, dtype=torch.long).expand(b, -1).clone()
    else:
        positions = position_ids_from_mask(mask)
    return SeqBatch(ids, mask, positions, p, comp, cmask)


def count_tokens(completion: list[int], pad_id: int) -> int:
    """Completion tokens that count in the loss (pad-id tokens are masked)."""
    return sum(1 for t in completion if t != pad_id)


def trim_completion(tokens: list[int], stop_ids: set[int], max_len: int) -> list[int]:
    """Cut a sampled completion after its first stop token (kept: the model learns to stop)."""
    out = []
    for t in tokens[:max_len]:
        out.append(int(t))
        if t in stop_ids:
            break
    return out
