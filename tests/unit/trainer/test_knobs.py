"""Knobs that need no model: the scheduler and warmup shape the lr curve, the teacher mode, the
global batch kept across process counts."""

from __future__ import annotations

import pytest
import torch

from opsdctl.recipes import knobs
from opsdctl.recipes.profiles import get_profile

torch.set_num_threads(1)


def test_scheduler_and_warmup_shape_the_lr_curve():
    from trainer.optim import lr_curve

    hp = {**knobs.default_hparams(), "learning_rate": 1e-3}
    assert lr_curve(hp, 10) == [1e-3] * 10
    cos = lr_curve({**hp, "lr_scheduler_type": "cosine"}, 10)
    lin = lr_curve({**hp, "lr_scheduler_type": "linear"}, 10)
    assert cos[0] == lin[0] == 1e-3 and cos[-1] < 1e-4 and lin[-1] == pytest.approx(1e-4)
    assert cos[3] > lin[3]  # cosine holds higher early on
    warm = lr_curve({**hp, "lr_scheduler_type": "cosine", "warmup_ratio": 0.3}, 10)
    assert warm[:4] == pytest.approx([0.0, 1e-3 / 3, 2e-3 / 3, 1e-3])
    cw = lr_curve({**hp, "lr_scheduler_type": "constant_with_warmup", "warmup_ratio": 0.5}, 4)
    assert cw == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])


def test_teacher_mode_from_knobs():
    from trainer.teacher import teacher_mode

    hp = knobs.default_hparams()
    assert teacher_mode(hp) == "fixed"
    assert teacher_mode({**hp, "fixed_teacher": False}) == "current"
    assert teacher_mode({**hp, "fixed_teacher": False, "use_ema_teacher": True}) == "ema"


def test_global_batch_is_kept_when_processes_differ():
    from trainer.train import accumulation_for

    prof = get_profile("qwen3-1.7b")  # 4 per device x 2 accumulation x 4 processes = 32
    notes = []
    assert accumulation_for(prof, 4, notes.append) == 2 and notes == []
    assert accumulation_for(prof, 2, notes.append) == 4 and accumulation_for(prof, 8, notes.append) == 1
    assert accumulation_for(prof, 3, notes.append) == 2 and "warning" in notes[-1]
