"""The adaptive policy (opsdctl.plan.policy.plan) on hand-built compare reports: first runs of new
variants first, repeats that can settle a verdict by P(beat) within the time left, nothing for
`worse` or futile variants (skipped with reasons), baseline repeats when candidates need them,
priority first, fifo untouched, and --auto-repeat's one extra chain."""

from __future__ import annotations

from opsdctl.config import Reference
from opsdctl.plan.policy import PlanInputs, QueuedItem, plan
from opsdctl.stats.compare import RunRecord, build_report
from tests.support.report_doc import report as typed

MIN = 60.0
CHAIN = 46 * MIN


def cand(name, n, delta, p, verdict="undecided", need=None, base_too=False, both=None, worse=None):
    return {"name": name, "n": n, "delta": delta, "p_beat": p, "verdict": verdict, "runs_needed": need,
            "runs_needed_worse": worse,
            "needs_baseline_runs": base_too, "runs_needed_both_arms": both, "partial": False, "mean": 54.22 + delta}


def report(*entries, base_source="reference", base_n=5, s=1.48, nu=6, m=None):
    m = m if m is not None else len(entries)
    return typed({"baseline": {"name": "baseline", "source": base_source, "n": base_n, "mean": 54.22},
                  "noise": {"s": s, "nu": nu, "tau2": 1.0},
                  "alpha_spending": {"m": m, "alpha": 0.05, "better_at": 1 - 0.05 / max(m, 1),
                                 "worse_at": 0.05 / max(m, 1)},
                  "variants": list(entries)})


def q(*pairs):
    return [QueuedItem(i, v, p) for i, v, *rest in pairs for p in [rest[0] if rest else 0]]


def test_first_runs_of_new_variants_before_repeats():
    rep = report(cand("a", 1, 2.5, 0.93, need=2), cand("b", 1, 0.5, 0.62, need=30))
    p = plan(q((1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "d"), (6, "c")), rep, PlanInputs(baseline="baseline",
             usable_s=300 * MIN, chain_s=CHAIN, voi=False))
    assert p.order[:2] == [3, 5]  # c and d have no run yet: one each, queue order
    assert p.order[2:4] == [1, 4]  # then a: undecided, P(beat) 0.93, 2 runs settle it and fit
    assert p.order[4:] == [2, 6]  # b is out of reach (30 runs) but promising; c's second chain waits its first
    tiers = {s.chain_id: s.tier for s in p.slots}
    assert tiers == {3: "1", 5: "1", 1: "2a", 4: "2a", 2: "3", 6: "4"}
    assert p.skips == {}


def test_repeats_by_p_beat_and_only_as_many_as_needed():
    rep = report(cand("a", 2, 1.8, 0.90, need=1), cand("b", 2, 2.6, 0.97, need=2))
    p = plan(q((1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "b")), rep, PlanInputs(baseline="baseline",
             usable_s=400 * MIN, chain_s=CHAIN, voi=False))
    assert p.order == [3, 4, 1, 5, 2]  # b (0.97) x2, then a (0.90) x1, then the extra runs by P(beat)
    assert [s.tier for s in p.slots] == ["2a", "2a", "2a", "3", "3"]
    assert "beyond the +2 run(s)" in p.slots[3].why


def test_what_does_not_fit_in_the_time_left_waits():
    rep = report(cand("a", 1, 2.0, 0.92, need=3), cand("b", 1, 1.0, 0.75, need=1))
    p = plan(q((1, "a"), (2, "b")), rep, PlanInputs(baseline="baseline", usable_s=100 * MIN, chain_s=CHAIN, voi=False))
    assert p.order == [2, 1]  # a needs 3 x 46 min > 100 min; b's 1 run fits
    assert {s.chain_id: s.tier for s in p.slots} == {1: "3", 2: "2a"}
    p = plan(q((1, "a"), (2, "b")), rep, PlanInputs(baseline="baseline", usable_s=100 * MIN, chain_s=CHAIN, voi=False, chain_median_s=27 * MIN))
    assert p.order == [1, 2]  # 2 x 27 + 46 = 100 min: a's 3 runs fit, and it has the higher P(beat)


def test_nothing_for_worse_or_futile_variants():
    rep = report(cand("bad", 2, -4.0, 0.002, verdict="worse"), cand("a", 1, 1.0, 0.7, need=4))
    p = plan(q((1, "bad"), (2, "a"), (3, "dropped"), (4, "bad")), rep, PlanInputs(baseline="baseline", usable_s=None,
             chain_s=CHAIN, dropped={"dropped": "an evaluation of it was stopped as futile (chain 9: ...)"}))
    assert p.order == [2]
    assert set(p.skips) == {1, 3, 4}
    assert p.skips[1].startswith("verdict worse (P(beat) = 0.002 <= 0.025)")
    assert "stopped as futile" in p.skips[3]


def test_settling_worse_comes_after_settling_better():
    rep = report(cand("up", 1, 1.5, 0.85, need=3), cand("down", 1, -2.5, 0.07, worse=2), m=2, nu=40)
    p = plan(q((1, "down"), (2, "up")), rep, PlanInputs(baseline="baseline", usable_s=600 * MIN, chain_s=CHAIN, voi=False))
    assert p.order == [2, 1]
    assert {s.chain_id: s.tier for s in p.slots} == {2: "2a", 1: "2b"}


def test_baseline_repeats_when_a_candidate_needs_them():
    rep = report(cand("a", 3, 2.0, 0.96, need=None, base_too=True, both=2), base_source="runs", base_n=1)
    p = plan(q((1, "x"), (2, "baseline"), (3, "a")), rep, PlanInputs(baseline="baseline", usable_s=400 * MIN, chain_s=CHAIN))
    assert p.order == [1, 2, 3]  # the new variant first, then baseline and candidate runs
    assert {s.chain_id: s.tier for s in p.slots} == {1: "1", 2: "2a", 3: "2a"}
    # measured by the published reference instead: local baseline runs remove its setup offset,
    # so they help too
    rep = report(cand("a", 3, 2.0, 0.96, need=None, base_too=True, both=2), base_source="reference")
    p = plan(q((2, "baseline"), (3, "a")), rep, PlanInputs(baseline="baseline", usable_s=400 * MIN, chain_s=CHAIN))
    assert {s.chain_id: s.tier for s in p.slots} == {2: "2a", 3: "2a"}


def test_no_baseline_at_all_runs_it_first():
    rep = report(base_source=None, base_n=0, s=None, nu=0)
    p = plan(q((1, "a"), (2, "baseline")), rep, PlanInputs(baseline="baseline", usable_s=None, chain_s=CHAIN))
    assert p.order == [2, 1]


def test_priority_first_and_fifo_untouched():
    rep = report(cand("a", 1, 2.5, 0.93, need=1))
    p = plan(q((1, "a", 0), (2, "new", 0), (3, "a", 5)), rep, PlanInputs(baseline="baseline", usable_s=None, chain_s=CHAIN))
    assert p.order == [3, 2, 1]
    f = plan(q((1, "a"), (2, "new"), (3, "bad")), report(cand("bad", 2, -5, 0.001, verdict="worse")),
             PlanInputs(policy="fifo", baseline="baseline"))
    assert f.order == [1, 2, 3] and f.skips == {}


def test_auto_repeat_adds_one_chain_only_when_nothing_queued_can_settle_anything():
    rep = report(cand("a", 2, 2.0, 0.95, need=2), cand("b", 2, 1.0, 0.80, need=5), cand("s", 3, 4.0, 0.999, verdict="better"))
    p = plan(q((1, "s")), rep, PlanInputs(baseline="baseline", usable_s=300 * MIN, chain_s=CHAIN, voi=False, auto_repeat=True,
             known_variants=["a", "b", "s"]))
    assert p.extra == "a" and "P(beat) 0.950" in p.extra_why
    p = plan(q((1, "b")), rep, PlanInputs(baseline="baseline", usable_s=300 * MIN, chain_s=CHAIN, voi=False, auto_repeat=True,
             known_variants=["a", "b", "s"]))
    assert p.extra is None  # b's repeat can settle it: nothing added
    p = plan([], rep, PlanInputs(baseline="baseline", usable_s=40 * MIN, chain_s=CHAIN, voi=False, auto_repeat=True, known_variants=["a"]))
    assert p.extra is None  # not even one chain fits
    p = plan([], rep, PlanInputs(baseline="baseline", usable_s=300 * MIN, chain_s=CHAIN, voi=False, auto_repeat=False, known_variants=["a"]))
    assert p.extra is None  # opt-in


def test_on_a_real_report():
    """build_report's output drives the same decisions (keys and types as the policy reads them)."""
    runs = []
    cid = 0
    for name, scores in {"hot": [58.5, 57.9, 58.2], "cold": [46.0, 45.1, 45.5, 46.2], "mid": [55.0]}.items():
        for y in scores:
            cid += 1
            runs.append(RunRecord(name, cid, y, 12, 30, None, None, False))
    rep = build_report(runs, baseline="baseline", reference=Reference(54.22, 1.48, 5))
    verdicts = {e.name: e.verdict for e in rep.entries}
    assert verdicts["cold"] == "worse" and verdicts["hot"] in ("better", "undecided")
    p = plan(q((10, "cold"), (11, "mid"), (12, "new"), (13, "hot")), rep, PlanInputs(baseline="baseline",
             usable_s=300 * MIN, chain_s=CHAIN))
    assert 10 in p.skips and set(p.order) == {11, 12, 13}
    assert p.skips[10].endswith(f"<= {by_name_worse(rep, 'cold'):.3g}): no more runs for it")


def by_name_worse(rep, name):
    return next(e.worse_at for e in rep.entries if e.name == name)




def test_objective_verdicts_holds_new_ideas_to_the_arms_the_session_can_settle():
    # a tried once beside one local baseline run; 6 more chains fit: 8 runs in the session, and
    # one arm per four runs is the baseline and a alone, so b and c wait behind a's repeats
    rep = typed({"baseline": {"name": "baseline", "source": "runs+reference", "n": 6, "n_local": 1, "mean": 54.22},
                 "noise": {"s": 1.48, "nu": 4.0, "tau2": 1.0},
                 "variants": [cand("a", 1, 0.4, 0.58)]})
    queue = q((1, "b"), (2, "a"), (3, "c"), (4, "baseline"))
    inputs = dict(baseline="baseline", usable_s=6 * CHAIN, chain_s=CHAIN)
    bet = plan(queue, rep, PlanInputs(**inputs, voi=False))
    assert bet.order[:2] == [1, 3]  # the tiers alone: every new idea's first run first
    v = plan(queue, rep, PlanInputs(**inputs, objective="verdicts"))
    held = {s.chain_id: s for s in v.slots}
    assert held[1].tier == held[3].tier == "4" and "held back" in held[1].why
    assert v.order.index(2) < v.order.index(1) and v.order.index(2) < v.order.index(3)
    # with 14 chains left, the session's runs (16) pay for four arms: b and c may run
    v = plan(queue, rep, PlanInputs(**{**inputs, "usable_s": 14 * CHAIN}, objective="verdicts"))
    assert {s.chain_id: s.tier for s in v.slots}[1] == "1" and {s.chain_id: s.tier for s in v.slots}[3] == "1"
    # no budget: no bound
    v = plan(queue, rep, PlanInputs(**{**inputs, "usable_s": None}, objective="verdicts"))
    assert v.order[:2] == [1, 3]


def test_objective_verdicts_ignores_the_ranking_and_puts_its_own_repeat_first():
    from opsdctl.plan.advise import Action, Advice

    rep = report(cand("a", 2, 3.0, 0.97, need=2), cand("b", 1, 0.2, 0.55))
    advice = [Advice(Action.NEW, "c", 46.0, True, 0.5)]  # the bet would try c
    queue = q((1, "c"), (2, "b"))
    v = plan(queue, rep, PlanInputs(baseline="baseline", usable_s=4 * CHAIN, chain_s=CHAIN, advice=advice,
                                    objective="verdicts", auto_repeat=True, known_variants=["a", "b"]))
    assert all(s.tier != "v" for s in v.slots)
    assert v.extra == "a" and v.extra_first  # a's repeats can settle it: before chains that cannot
    bet = plan(queue, rep, PlanInputs(baseline="baseline", usable_s=4 * CHAIN, chain_s=CHAIN, advice=advice,
                                      auto_repeat=True, known_variants=["a", "b"]))
    assert bet.slots[0].tier == "v" and bet.slots[0].variant == "c"


def test_objective_verdicts_leaves_no_budget_idle_when_nothing_is_left_to_settle():
    from opsdctl.plan.advise import Action, Advice

    rep = report(cand("a", 2, 0.3, 0.6), cand("b", 2, -0.4, 0.4))  # nothing within reach of a verdict
    advice = [Advice(Action.REEVAL, "a", 26.0, True, 0.05), Advice(Action.STOP, None, 0.0, True, 0.0)]
    inputs = dict(baseline="baseline", usable_s=30 * MIN, chain_s=CHAIN, objective="verdicts", auto_repeat=True,
                  known_variants=["a", "b"], reevals=("a",))
    p = plan([], rep, PlanInputs(**inputs, advice=advice))
    assert (p.extra, p.extra_reeval, p.extra_first) == ("a", True, False)  # after any queued chain
    assert p.extra_why.endswith("(nothing left to settle)")
    stop = plan([], rep, PlanInputs(**inputs, advice=advice[1:]))
    assert stop.extra is None  # the ranking's stop still stops


def test_a_chain_running_now_is_an_observation_on_its_way():
    """With several chains at once, a free slot must not take the first run of a variant whose
    first run already runs: its queued second chain waits like a repeat of a variant not yet run,
    and the ranking's pick passes over it to the next action."""
    from opsdctl.plan.advise import Action, Advice

    rep = report(cand("a", 1, 1.0, 0.7))
    queue = q((1, "b"), (2, "b"), (3, "c"))
    inputs = dict(baseline="baseline", usable_s=6 * CHAIN, chain_s=CHAIN, voi=False)
    assert plan(queue, rep, PlanInputs(**inputs)).order == [1, 3, 2]  # b's first run, c's, b's second
    p = plan(queue, rep, PlanInputs(**inputs, in_flight={"b": 1}))
    assert p.order == [3, 1, 2]  # b's first run is running: c's first run goes first
    assert {s.chain_id: str(s.tier) for s in p.slots} == {3: "1", 1: "4", 2: "4"}

    advice = [Advice(Action.NEW, "b", 46.0, True, 0.5), Advice(Action.REPEAT, "a", 46.0, True, 0.3),
              Advice(Action.STOP, None, 0.0, True, 0.0)]
    queue = q((1, "b"), (2, "c"), (3, "a"))
    ranked = dict(baseline="baseline", usable_s=6 * CHAIN, chain_s=CHAIN, advice=advice, known_variants=["a"])
    assert plan(queue, rep, PlanInputs(**ranked)).slots[0].variant == "b"
    p = plan(queue, rep, PlanInputs(**ranked, in_flight={"b": 1}))
    assert (p.slots[0].variant, str(p.slots[0].tier)) == ("a", "v")  # the next ranked action
    stop = plan(queue, rep, PlanInputs(**ranked, in_flight={"b": 1, "a": 1}))
    assert all(str(s.tier) != "v" for s in stop.slots)  # stop ranks next: the tiers order, nothing added
    assert stop.extra is None
