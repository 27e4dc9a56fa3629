"""Futility: the rule on look records, against float64 by hand and opsdctl.stats.inference, and the
gate's use of it."""

from __future__ import annotations

import math

import numpy as np

from support.gpus import NoFacts

from opsdctl.plan.futility import FutilityContext, judge_look, look_counts
from opsdctl.stats import inference as stats
from opsdctl.store.states import TERMINAL, TRANSITIONS, State


def test_stopped_futile_is_a_terminal_state_reached_from_running():
    assert State("stopped-futile") is State.STOPPED_FUTILE
    assert State.STOPPED_FUTILE in TRANSITIONS[State.RUNNING]
    assert State.STOPPED_FUTILE in TERMINAL and State.STOPPED_FUTILE not in TRANSITIONS[State.QUEUED]


def test_judge_look_by_hand():
    rng = np.random.default_rng(3)
    counts = [int(x) for x in rng.integers(0, 5, size=30)]
    rec = {"done": 120, "total": 360, "look_k": 4,
           "problems": [{"id": f"P{i}", "correct": c, "samples": 4} for i, c in enumerate(counts)]}
    ctx = FutilityContext(baseline_mean=54.22, n_b=5, s2=1.48**2, tau2=0.9)
    look = judge_look(rec, ctx)
    c = np.asarray(counts, dtype=np.float64)
    y = 100.0 * c.sum() / (30 * 4)
    v = 1e4 / 30**2 * np.sum(c * (4 - c)) / (4**2 * 3)
    se = math.sqrt(0.9 + v + 1.48**2 / 5)
    from scipy.stats import norm

    z = norm.ppf(1 - 0.05 / 3)  # 2.128
    assert look.k == 4 and look.n_problems == 30
    assert math.isclose(look.score, y) and math.isclose(look.delta, y - 54.22)
    assert math.isclose(look.se, se, rel_tol=1e-12)
    assert math.isclose(look.bound, y - 54.22 + z * se, rel_tol=1e-9)
    assert look.stop == (y - 54.22 + z * se < 0)


def test_stop_and_go_on_at_the_boundary():
    ctx = FutilityContext(54.22, 5, 1.48**2, 1.0)
    probs = lambda c: {"problems": [{"id": str(i), "correct": c, "samples": 8} for i in range(30)]}  # noqa: E731
    low = judge_look(probs(3), ctx)  # 37.5 points: far below
    assert low.stop and "futile at k=8" in low.reason()
    near = judge_look(probs(4), ctx)  # 50.0: within the optimistic bound
    assert not near.stop
    # tau^2 unknown: taken as s^2 (its upper bound), never a narrower SE
    from tests.support.report_doc import report as typed

    report = typed({"baseline": {"mean": 54.22, "n": 5}, "noise": {"s": 1.48, "tau2": None}})
    assert FutilityContext.from_report(report).tau2 == 1.48**2
    assert FutilityContext.from_report(typed({"baseline": {"mean": None, "n": 0}, "noise": {"s": None}})) is None


def test_look_counts_refuses_what_is_not_a_look():
    assert look_counts({"done": 3, "total": 9}) is None
    assert look_counts({"problems": [{"id": "a", "correct": 1, "samples": 4}, {"id": "b", "correct": 1, "samples": 8}]}) is None
    assert look_counts({"problems": [{"id": "a", "correct": 5, "samples": 4}]}) is None
    assert look_counts({"problems": [{"id": "a", "correct": 1, "samples": 1}]}) is None  # V needs k >= 2
    assert look_counts({"problems": [{"id": "a", "correct": 2, "samples": 4}]}) == ([2], 4)


def test_winner_drop_rate_is_at_most_five_percent():
    """Null-ish winners (true delta 0, the boundary of 'winner') are stopped at k=4 or 8 in <= 5%."""
    rng = np.random.default_rng(11)
    n, k_full, tau2 = 30, 12, 0.8
    p = np.clip(rng.beta(0.3, 0.25, size=n), 0.01, 0.99)
    base = 100 * p.mean()
    ctx = FutilityContext(base, 5, tau2 + 1e4 / n**2 * np.sum(p * (1 - p)) / k_full, tau2)
    stops = 0
    trials = 400
    for _ in range(trials):
        shift = rng.normal(0, math.sqrt(tau2)) / 100
        q = np.clip(p + shift, 0, 1)
        draws = rng.random((n, k_full)) < q[:, None]
        for k in (4, 8):
            rec = {"problems": [{"id": str(i), "correct": int(x), "samples": k} for i, x in enumerate(draws[:, :k].sum(1))]}
            if judge_look(rec, ctx).stop:
                stops += 1
                break
    assert stops / trials <= 0.05
    assert abs(stats.futility_z() - 2.128) < 1e-3


def test_the_gate_runs_the_leaders_repeat_first_and_leaves_futility_off_when_a_stop_buys_nothing():
    """PlannerGate with the adaptive policy: the pick of `opsdctl advise`'s ranking queued by
    --auto-repeat (a repeat of the candidate close to the baseline: no new idea is queued and the
    baseline has no run of its own) goes first, and its evaluation is not watched by futility (its
    score is the observation it was ranked for)."""
    from opsdctl.config import Reference
    from opsdctl.plan.gate import ChainInfo, Grant
    from opsdctl.plan.planner import PlannerGate, PlannerSettings
    from opsdctl.stats.compare import RunRecord

    def info(cid, v):
        return ChainInfo(chain_id=cid, variant=v, variant_id=cid, variant_name=v, version=1, hash=v, seed=cid,
                         repeat=0, priority=0, profile="p", hparams={}, method={})

    class Facts(NoFacts):
        def runs(self):
            return [RunRecord("a", 1, 55.4, 12, 30, None, None, False), RunRecord("a", 2, 54.2, 12, 30, None, None, False)]

        def queue_repeat(self, variant, why):
            return info(9, variant)

    settings = PlannerSettings(policy="adaptive", futility=True, auto_repeat=True, baseline="baseline",
                               reference=Reference(54.22, 1.48, 5))
    # by default the user's queued chain goes first and auto-repeat queues nothing ahead of it
    gate = PlannerGate(settings, Facts(), budget_left=lambda: 140 * 60.0)
    assert [c.chain_id for c in gate.order([info(5, "new")])] == [5] and gate.extra_queued == 0
    # with nothing of the user's queued, auto-repeat queues the ranking's pick and runs it first
    gate = PlannerGate(settings, Facts(), budget_left=lambda: 140 * 60.0)
    order = gate.order([])
    assert [c.chain_id for c in order][0] == 9 and order[0].variant == "a"
    assert gate.plan.extra_why.startswith("advise: one more run of a")
    assert gate.plan.extra_first and gate.plan.full_eval == ["a"]
    assert isinstance(gate.grant(order[0], "eval"), Grant)
    low = {"problems": [{"id": str(i), "correct": 0, "samples": 4} for i in range(30)]}
    assert gate.on_progress(order[0], "eval", low) is None  # not watched: no stop, however bad
