"""The simulator scores every policy's submission with the rule users submit by
(plan.submission.pick_leader on the final compare report), so the planner's figures include the
number a researcher is paid on, not only the verdicts."""

from __future__ import annotations

from opsdctl.plan.submission import pick_leader
from opsdctl.sim.replay import simulate_session
from opsdctl.sim.results import markdown, run_benchmark
from opsdctl.sim.world import BASELINE


def test_the_submission_is_pick_leaders_on_the_final_report_scored_by_its_true_effect():
    effects = (0.0, -3.0, 4.0)
    seen = set()
    for seed in range(6):
        res = simulate_session("adaptive", seed, effects=effects)
        lead = pick_leader(res.report)
        assert res.submitted == (lead.variant or BASELINE)
        truth = {BASELINE: 0.0, **{n: eff for n, (_, eff) in res.verdicts.items()}}
        assert res.submission_gain == truth[res.submitted]
        assert res.regret == max(effects + (0.0,)) - res.submission_gain >= 0.0
        seen.add(res.submission_gain)
    assert 4.0 in seen  # the +4 idea is found and submitted in some sessions


def test_the_table_reports_the_bet_next_to_the_verdicts():
    doc = run_benchmark(sessions=2, effects=(0.0, 2.0), policies=["fifo-by-hand x2", "adaptive"])
    for r in doc["policies"].values():
        assert {"submission_gain", "submission_regret", "submission_worse_by_1"} <= set(r)
    md = markdown(doc)
    assert "submission's true gain" in md and "regret vs the best idea" in md
