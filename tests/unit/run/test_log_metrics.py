"""`[stages.train.metrics]` on log text: each regex read at its line's own step, else from the
Trainer's bar or the rank, averaged per step, merged into the curve over the worker's guesses."""

from __future__ import annotations

import pytest
from support.stage_output import FRAC, KL

from opsdctl.run.log_metrics import apply, scan
from opsdctl.run.results import TrainSummary

LINE = "[OPSD kl] step 26: mean per-token KL(T||S)=0.0979 max=1.31 frac above tau=0.353"


def test_scan_reads_the_released_line_at_its_own_step():
    got = scan(LINE + "\n", [("kl", KL), ("frac_clipped", FRAC)])
    assert got == {26: {"kl": 0.0979, "frac_clipped": 0.353}}


def test_scan_steps_from_the_bar_or_the_rank_and_averages_a_step():
    bar_log = " 3%|3         | 3/100 [00:30<16:00]\rKL(T||S)=0.2\nKL(T||S)=0.4\n 4%|4         | 4/100 [00:40<16:00]\rKL(T||S)=1e-1\n"
    # a line printed after the bar showed 3 finished steps belongs to step 4; two matches average
    got = scan(bar_log, [("kl", KL)])
    assert list(got) == [4, 5] and got[4]["kl"] == pytest.approx(0.3) and got[5] == {"kl": 0.1}
    plain = "KL(T||S)=0.5\nnoise KL(T||S)=nan? KL(T||S)=.\nKL(T||S)=0.25\n"
    assert scan(plain, [("kl", KL)]) == {1: {"kl": 0.5}, 2: {"kl": 0.25}}  # not a number: skipped
    assert scan("step 7: x\n", [("kl", KL)]) == {} and scan(LINE, []) == {}


def test_declared_metrics_merge_into_the_curve_and_win_over_guesses():
    guessed = TrainSummary(steps=2, mean_kl=9.0, curve=[{"step": 1, "loss": -0.1, "kl": 9.0}, {"step": 2, "loss": -0.2}],
                           source="log")
    log = "step 1 KL(T||S)=0.2 frac above tau=0.5\nstep 2 KL(T||S)=0.1 frac above tau=0.3\nstep 3 KL(T||S)=0.06\n"
    s = apply(guessed, log, [("kl", KL), ("frac_clipped", FRAC)])
    assert s.curve == [{"step": 1, "loss": -0.1, "kl": 0.2, "frac_clipped": 0.5}, {"step": 2, "loss": -0.2, "kl": 0.1,
                       "frac_clipped": 0.3}, {"step": 3, "kl": 0.06}]
    assert s.mean_kl == pytest.approx(0.12) and s.frac_clipped == pytest.approx(0.4)
    assert s.metrics["kl"] == {"mean": pytest.approx(0.12), "last": 0.06, "steps": 3}
    assert s.source == "log+[stages.train.metrics]"
    # dict lines without a step (no bar): numbered by the logging rule, 2 lines over 4 steps = every 2
    stepless = TrainSummary(curve=[{"loss": -0.1}, {"loss": -0.2}], source="log")
    s = apply(stepless, "".join(f"step {i} KL(T||S)=0.{i}\n" for i in (1, 2, 3, 4)), [("kl", KL)])
    assert s.curve == [{"step": 1, "kl": 0.1}, {"step": 2, "loss": -0.1, "kl": 0.2}, {"step": 3, "kl": 0.3},
                       {"step": 4, "loss": -0.2, "kl": 0.4}]
    odd = apply(TrainSummary(curve=[{"loss": 1.0}] * 3), "step 4 KL(T||S)=0.4\n", [("kl", KL)])
    assert [p.get("step") for p in odd.curve] == [4, None, None, None]  # 4 / 3 steps: not guessed
    alone = apply(None, log, [("kl", KL)])  # a script that prints nothing else still gets a summary
    assert alone.steps == 3 and [p["step"] for p in alone.curve] == [1, 2, 3]
