"""The effective-config check as pure functions of a log and a recipe; the
schedules the logs follow are transformers' own get_scheduler's, the way HF Trainer logs, stored
(tests/support/hf_schedules.py: importing the scheduler takes seconds)."""

from __future__ import annotations

import pytest

from opsdctl.recipes import knobs
from opsdctl.contract.effective_config import MISMATCH, NOT_VERIFIED, VERIFIED, check_log, schedule_factor
from tests.support.hf_schedules import stored


def recipe(**kw) -> dict:
    return {**knobs.default_hparams(), **kw}


def hf_rates(sched: str, lr: float, steps: int, warmup_ratio: float = 0.0, after_step: bool = True) -> list[float]:
    """transformers' learning rate at each optimizer step: after the step's scheduler.step()
    (what HF Trainer logs), or the one the step used (what our trainer logs), as stored by
    tests/support/hf_schedules.py (tests/integration/test_hf_schedules.py keeps it transformers')."""
    return stored(sched, lr, steps, warmup_ratio, after_step)


def log_of(rates: list[float], every: int = 1, step_field: bool = False, modes: str = "", bar: bool = False,
           note: str = "") -> str:
    lines = ["Map: 100%|##########| 3200/3200 [00:01<00:00]"] + [x for x in (modes, note) if x]
    for i, lr in enumerate(rates, 1):
        if bar:  # the Trainer's own tqdm bar (no description), redrawn with \r
            lines.append(f"\r{100 * i // len(rates):3d}%|#####     | {i}/{len(rates)} [00:{i:02d}<00:10, 1.00s/it]")
        if i % every:
            continue
        d = {"loss": -0.0021, "grad_norm": 0.0492, "learning_rate": lr, "on_policy_loss": -0.0021, "epoch": 0.02}
        if step_field:
            d["step"] = i
        lines.append(repr(d))
    lines.append(repr({"train_runtime": 908.19, "train_samples_per_second": 3.523, "train_steps_per_second": 0.11,
                       "train_loss": -0.0079, "epoch": 0.27}))
    return "\n".join(lines) + "\n"


def test_the_reported_example_constant_rate_differs():
    log = log_of(hf_rates("constant", 5e-6, 100))
    c = check_log(log, recipe(learning_rate=1e-5), {}, max_steps=100)
    assert c.status == MISMATCH
    assert c.reason == "recipe not applied: log says learning_rate 5e-06, recipe says 1e-05"


def test_constant_rate_matches():
    c = check_log(log_of(hf_rates("constant", 5e-6, 100), every=10, bar=True), recipe(), {}, max_steps=100)
    assert c.status == VERIFIED and c.reason is None
    assert {x["knob"] for x in c.checked} == {"learning_rate", "schedule"}


@pytest.mark.parametrize("sched,warmup", [("cosine", 0.0), ("cosine", 0.1), ("linear", 0.0), ("linear", 0.05),
                                          ("constant_with_warmup", 0.1)])
@pytest.mark.parametrize("every,how", [(1, "count"), (10, "bar"), (10, "step"), (20, "step"), (3, "bar")])
def test_transformers_schedules_verify(sched, warmup, every, how):
    log = log_of(hf_rates(sched, 2e-6, 100, warmup), every=every, step_field=how == "step", bar=how == "bar")
    c = check_log(log, recipe(learning_rate=2e-6, lr_scheduler_type=sched, warmup_ratio=warmup), {}, max_steps=100)
    assert c.status == VERIFIED, c.to_dict()
    assert "schedule" in {x["knob"] for x in c.checked}


def test_our_trainer_alignment_and_profile_scale():
    """Our trainer logs the rate each step used (one step earlier than HF) on a 6-step profile
    whose learning_rate_scale is 10, which its log says."""
    note = "profile tiny: learning_rate 5e-06 scaled by 10 (learning_rate_scale) -> 5e-05"
    log = log_of(hf_rates("linear", 5e-5, 6, after_step=False), note=note)
    c = check_log(log, recipe(learning_rate=5e-6, lr_scheduler_type="linear"), {}, max_steps=6, lr_scale=10.0)
    assert c.status == VERIFIED, c.to_dict()
    unscaled = log_of(hf_rates("linear", 5e-6, 6, after_step=False))  # a script that does not scale
    assert check_log(unscaled, recipe(lr_scheduler_type="linear"), {}, max_steps=6, lr_scale=10.0).status == VERIFIED


def test_lines_are_never_counted_as_steps():
    """logging_steps = 10 and no bar or step field: the steps of a decaying schedule are
    unknown, so its shape is not guessed (a constant rate is still checked)."""
    c = check_log(log_of(hf_rates("cosine", 5e-6, 100), every=10), recipe(lr_scheduler_type="cosine"), {},
                  max_steps=100)
    assert c.status == NOT_VERIFIED and any("which step" in u for u in c.unchecked), c.to_dict()
    bad = check_log(log_of(hf_rates("constant", 5e-6, 100), every=10), recipe(learning_rate=1e-5), {}, max_steps=100)
    assert bad.status == MISMATCH


@pytest.mark.parametrize("logged,asked,words", [
    ("constant", "cosine", "log's learning rates follow a constant schedule, recipe says lr_scheduler_type cosine"),
    ("cosine", "linear", "log's learning rates follow a cosine schedule, recipe says lr_scheduler_type linear"),
    ("linear", "cosine", "log's learning rates follow a linear schedule, recipe says lr_scheduler_type cosine"),
])
def test_schedule_shape_differs(logged, asked, words):
    log = log_of(hf_rates(logged, 5e-6, 100), every=10, bar=True)
    c = check_log(log, recipe(lr_scheduler_type=asked), {}, max_steps=100)
    assert c.status == MISMATCH and c.reason == f"recipe not applied: {words}", c.to_dict()


def test_peak_differs_on_a_decaying_schedule():
    log = log_of(hf_rates("cosine", 5e-6, 100), every=5, step_field=True)
    c = check_log(log, recipe(learning_rate=1e-5, lr_scheduler_type="cosine"), {}, max_steps=100)
    assert c.status == MISMATCH and "peaks at 5e-06, recipe says 1e-05" in c.reason


def test_too_few_points_for_the_shape_still_checks_the_rate():
    log = log_of(hf_rates("cosine", 5e-6, 100)[:2], step_field=True)  # steps 1 and 2: shape unseen
    c = check_log(log, recipe(lr_scheduler_type="cosine"), {}, max_steps=100)
    assert c.status == VERIFIED and any("too few" in u for u in c.unchecked)


def test_modes_line():
    base = log_of(hf_rates("constant", 5e-6, 10), modes="[modes] teacher_thinking=False student_thinking=False")
    ok = check_log(base, recipe(teacher_thinking=False), {}, max_steps=10)
    assert ok.status == VERIFIED
    assert {x["knob"] for x in ok.checked} >= {"teacher_thinking", "student_thinking"}
    bad = check_log(base, recipe(teacher_thinking=True), {}, max_steps=10)
    assert bad.reason == "recipe not applied: log says teacher_thinking False, recipe says True"


def test_expect_patterns():
    log = "using clip=token tau=0.05 r=32\n"
    expect = {"clip_mode": r"clip=(\w+)", "jsd_token_clip": r"tau=([0-9.]+)", "lora_r": r"r=(\d+)",
              "lora_alpha": r"alpha=(\d+)"}
    c = check_log(log, recipe(lora_r=32), {"clip_mode": "token"}, max_steps=100, expect=expect)
    assert c.status == VERIFIED, c.to_dict()
    assert any("lora_alpha" in u and "not found" in u for u in c.unchecked)
    bad = check_log(log, recipe(lora_r=64), {"clip_mode": "token"}, max_steps=100, expect=expect)
    assert bad.reason == "recipe not applied: log says lora_r 32, recipe says 64"


def test_nothing_to_check_is_not_verified():
    c = check_log("training...\nFINAL done\n", recipe(), {}, max_steps=100)
    assert c.status == NOT_VERIFIED and c.checked == [] and c.reason is None
    assert "recipe not verified" in c.summary() and "learning_rate" in c.summary()


def test_schedule_factor_matches_transformers():
    for sched in ("linear", "cosine", "constant_with_warmup"):
        rates = hf_rates(sched, 1.0, 50, 0.2)
        shape = {"constant_with_warmup": "constant"}.get(sched, sched)
        for step, r in enumerate(rates, 1):
            assert schedule_factor(shape, step, 10, 50) == pytest.approx(r, abs=1e-12)
