"""AdamW and the learning-rate schedule (transformers.get_scheduler) from the recipe's knobs."""

from __future__ import annotations

import math

import torch


def make_optimizer(params, hparams: dict) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=hparams["learning_rate"], weight_decay=hparams["weight_decay"],
                             betas=(0.9, 0.999), eps=1e-8)


def warmup_steps(hparams: dict, max_steps: int) -> int:
    return math.ceil(hparams["warmup_ratio"] * max_steps)


def make_scheduler(optimizer, hparams: dict, max_steps: int):
    from transformers import get_scheduler

    return get_scheduler(hparams["lr_scheduler_type"], optimizer,
                         num_warmup_steps=warmup_steps(hparams, max_steps), num_training_steps=max_steps)


def lr_curve(hparams: dict, max_steps: int) -> list[float]:
    """The learning rate used at each optimizer step 1..max_steps (for tests and the log)."""
    param = torch.nn.Parameter(torch.zeros(1))
    opt = make_optimizer([param], hparams)
    sched = make_scheduler(opt, hparams, max_steps)
    out = []
    for _ in range(max_steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def clip_gradients(params, max_grad_norm: float) -> tuple[float, float]:
    """(norm before, norm after) clipping; max_grad_norm 0 = no clipping."""
    params = [p for p in params if p.grad is not None]
    limit = max_grad_norm if max_grad_norm > 0 else float("inf")
    before = torch.nn.utils.clip_grad_norm_(params, limit).item()
    after = torch.nn.utils.get_total_norm([p.grad for p in params]).item() if params else 0.0
    return before, after
