"""Which weights play the teacher.

- fixed   (fixed_teacher = true): the base model, i.e. the student with its adapter disabled
          (PEFT's disable_adapter); the base weights are frozen and never written to.
- ema     (use_ema_teacher = true): a second LoRA adapter "ema". As in the release
          (opsd_trainer.py _update_ema), it is a snapshot of the student after the first
          optimizer step, then ema <- decay * ema + (1 - decay) * student after every later one;
          before that first step it equals the (initial) student.
- current (both false): the student's own current weights, without gradient.
The teacher always runs in eval mode (no LoRA dropout) and under no_grad.
"""

from __future__ import annotations

import contextlib

import torch

STUDENT = "default"
EMA = "ema"


def teacher_mode(hparams: dict) -> str:
    if hparams["use_ema_teacher"]:
        return "ema"  # knobs.check_invariants refuses it together with fixed_teacher
    return "fixed" if hparams["fixed_teacher"] else "current"


def lora_pairs(peft_model, a: str, b: str):
    """(param of adapter a, param of adapter b) for every LoRA matrix."""
    for module in peft_model.modules():
        for kind in ("lora_A", "lora_B"):
            d = getattr(module, kind, None)
            if isinstance(d, torch.nn.ModuleDict) and a in d and b in d:
                yield d[a].weight, d[b].weight


def add_ema_adapter(peft_model, lora_config) -> None:
    peft_model.add_adapter(EMA, lora_config)
    with torch.no_grad():
        for ema, student in lora_pairs(peft_model, EMA, STUDENT):
            ema.copy_(student)
    peft_model.set_adapter(STUDENT)  # the student adapter active and trainable, ema frozen
    for ema, _ in lora_pairs(peft_model, EMA, STUDENT):
        ema.requires_grad_(False)


@torch.no_grad()
def ema_snapshot(peft_model) -> None:
    for ema, student in lora_pairs(peft_model, EMA, STUDENT):
        ema.copy_(student.detach())


@torch.no_grad()
def ema_update(peft_model, decay: float) -> None:
    for ema, student in lora_pairs(peft_model, EMA, STUDENT):
        ema.mul_(decay).add_(student.detach().to(ema.dtype), alpha=1.0 - decay)


@contextlib.contextmanager
def as_teacher(peft_model, mode: str):
    """Run the model as the teacher inside the block (eval mode, no grad)."""
    was_training = peft_model.training
    peft_model.eval()
    try:
        with torch.no_grad():
            if mode == "fixed":
                with peft_model.disable_adapter():
                    yield
            elif mode == "ema":
                peft_model.set_adapter(EMA)
                try:
                    yield
                finally:
                    peft_model.set_adapter(STUDENT)
                    for ema, _ in lora_pairs(peft_model, EMA, STUDENT):
                        ema.requires_grad_(False)
            elif mode == "current":
                yield
            else:
                raise ValueError(f"teacher mode {mode!r}")
    finally:
        peft_model.train(was_training)
