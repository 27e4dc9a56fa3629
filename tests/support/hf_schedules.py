"""transformers' learning-rate schedules as Hugging Face's Trainer logs them, stored.

The effective-config check's unit tests (tests/unit/contract/test_effective_config.py) read their
logs' rates from hf_schedules.json beside this file: importing transformers' scheduler costs about
four CPU seconds (it pulls in accelerate and peft), most of the contract tests' time.
tests/integration/test_hf_schedules.py checks that every stored schedule is still what the
installed transformers computes, so the unit tests stay tied to Hugging Face's own code.

    python -m tests.support.hf_schedules   # recompute SCHEDULES with the installed transformers
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

STORE = Path(__file__).with_name("hf_schedules.json")

# (schedule, peak lr, steps, warmup ratio, after_step): what the unit tests ask for
SCHEDULES = [
    ("constant", 5e-6, 10, 0.0, True),
    ("constant", 5e-6, 100, 0.0, True),
    ("cosine", 5e-6, 100, 0.0, True),
    ("linear", 5e-6, 100, 0.0, True),
    ("cosine", 2e-6, 100, 0.0, True),
    ("cosine", 2e-6, 100, 0.1, True),
    ("linear", 2e-6, 100, 0.0, True),
    ("linear", 2e-6, 100, 0.05, True),
    ("constant_with_warmup", 2e-6, 100, 0.1, True),
    ("linear", 5e-5, 6, 0.0, False),
    ("linear", 5e-6, 6, 0.0, False),
    ("linear", 1.0, 50, 0.2, True),
    ("cosine", 1.0, 50, 0.2, True),
    ("constant_with_warmup", 1.0, 50, 0.2, True),
]


def key(sched: str, lr: float, steps: int, warmup_ratio: float = 0.0, after_step: bool = True) -> str:
    return f"{sched} lr={lr!r} steps={steps} warmup={float(warmup_ratio)!r} {'after' if after_step else 'used'}"


def compute(sched: str, lr: float, steps: int, warmup_ratio: float = 0.0, after_step: bool = True) -> list[float]:
    """transformers' learning rate at each optimizer step: after the step's scheduler.step()
    (what HF Trainer logs), or the one the step used (what our trainer logs)."""
    import torch
    from transformers import get_scheduler

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    s = get_scheduler(sched, opt, num_warmup_steps=math.ceil(warmup_ratio * steps), num_training_steps=steps)
    out = []
    for _ in range(steps):
        used = opt.param_groups[0]["lr"]
        opt.step()
        s.step()
        out.append(opt.param_groups[0]["lr"] if after_step else used)
    return out


@cache
def _stored() -> dict:
    return json.loads(STORE.read_text())


def stored(sched: str, lr: float, steps: int, warmup_ratio: float = 0.0, after_step: bool = True) -> list[float]:
    k = key(sched, lr, steps, warmup_ratio, after_step)
    if k not in _stored():
        raise KeyError(f"{k}: not in {STORE.name}; add it to SCHEDULES in tests/support/hf_schedules.py "
                       "and run python -m tests.support.hf_schedules")
    return list(_stored()[k])


if __name__ == "__main__":
    STORE.write_text(json.dumps({key(*s): compute(*s) for s in SCHEDULES}, indent=0) + "\n")
    print(f"wrote {len(SCHEDULES)} schedules to {STORE}")
