"""The simulator: a smoke run of every policy over a few seeded sessions, its invariants (no cut
chain for the planner's policies; FIFO by hand loses the chain running at the deadline), that it
drives the worker's own decision code, and GPU slots (chains at once) through the same loop. Pure
and in process, but whole sessions: seconds of CPU each, so here rather than in the unit loop."""

from __future__ import annotations

import json

import pytest

from opsdctl.plan import planner
from opsdctl.sim.replay import POLICIES, simulate_session
from opsdctl.sim.results import run_benchmark, write_results
from opsdctl.sim.session import Session
from opsdctl.sim.world import BASE_MEAN, BASELINE, World


def test_smoke_and_invariants(tmp_path):
    doc = run_benchmark(sessions=1, seed=5)  # every policy once; the committed run is 150
    pol = doc["policies"]
    assert set(pol) == set(POLICIES)
    for name in ("planner fifo", "adaptive", "adaptive + futility"):
        assert pol[name]["chains_cut"]["mean"] == 0 and pol[name]["sessions_with_a_cut"] == 0
        assert pol[name]["gpu_busy_frac_until_idle"]["mean"] >= 0.99
    for name in ("fifo-by-hand x1", "fifo-by-hand x2"):
        assert pol[name]["chains_cut"]["mean"] == 1  # they run until the deadline cuts one
    assert pol["adaptive"]["chains_scored"]["mean"] >= 7
    assert 0.5 < doc["setup"]["tau2"] < 1.5 and abs(doc["setup"]["tau2"] + doc["setup"]["v_eval"] - 1.48**2) < 2e-3
    assert "| adaptive + futility |" in doc["markdown"]
    j, m = write_results(doc, tmp_path)
    assert json.loads(j.read_text())["policies"]["adaptive"]["sessions"] == 1
    assert m.read_text().startswith("Simulated 1 session per policy")


def test_the_simulator_drives_the_workers_decision_code(monkeypatch):
    calls = {"plan": 0, "admit_chain": 0, "judge_look": 0}
    real_plan, real_admit, real_judge = planner.policy.plan, planner.admission.admit_chain, planner.judge_look

    def spy(name, fn):
        def wrapped(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapped

    monkeypatch.setattr(planner.policy, "plan", spy("plan", real_plan))
    monkeypatch.setattr(planner.admission, "admit_chain", spy("admit_chain", real_admit))
    monkeypatch.setattr(planner, "judge_look", spy("judge_look", real_judge))
    r = simulate_session("adaptive + futility", seed=0)
    assert calls["plan"] >= r.started and calls["admit_chain"] >= r.started
    assert calls["judge_look"] >= 1  # the looks of the evaluations futility may stop
    assert r.cut == 0


def test_same_world_same_sessions_for_every_policy():
    a = simulate_session("fifo-by-hand x2", seed=9)
    b = simulate_session("planner fifo", seed=9)
    # same queue, same draws: the planner's FIFO differs only by not starting the chain that would be cut
    assert b.succeeded == a.succeeded and b.cut == 0 and a.cut == 1
    assert {k: v for k, v in a.verdicts.items()} == {k: v for k, v in b.verdicts.items()}


def test_the_oracle_ceiling_queues_only_the_largest_effects_and_the_bet_is_judged():
    r = simulate_session("oracle x2", seed=4, effects=(0.0, 0.0, 1.0, 2.0, 3.0, -2.0))
    s = Session(World.make(), (0.0, 0.0, 1.0, 2.0, 3.0, -2.0), 4, 6.0, 2)
    queued = {c.variant for c in r.chains}
    assert queued == {BASELINE} | {n for n, e in s.effects.items() if abs(e) >= 2}
    assert all(sum(c.variant == v for c in r.chains[:8]) == 2 for v in queued)  # each twice in a row
    # the bet: the arm of highest forecast mean, scored by its true effect
    assert r.submitted in s.effects and r.submission_gain == s.effects[r.submitted]
    assert simulate_session("fifo-by-hand x2", seed=4).submission_gain in set(s.effects.values())


def test_the_configs_published_reference_is_what_compare_reads():
    from opsdctl.stats.compare import Reference

    wrong = simulate_session("adaptive", seed=1, hours=2.0)
    right = simulate_session("adaptive", seed=1, hours=2.0, reference=Reference(BASE_MEAN, 2.5, 5))
    assert wrong.report.noise.s0 == pytest.approx(1.48) and right.report.noise.s0 == pytest.approx(2.5)


def test_objective_verdicts_spends_the_session_on_few_ideas_through_the_loop():
    """`--objective verdicts --auto-repeat-first` in the real loop: the ideas tried are held to what
    ~8 chains can settle, and its own repeat of the idea that can settle runs before a user's chain
    queued earlier; the bet's ranking on the same session tries every idea once."""
    effects = (0.0, 0.0, 1.0, 2.0, 3.0, -2.0)
    v = simulate_session("verdicts, auto-repeat first", seed=5, effects=effects)
    bet = simulate_session("adaptive", seed=5, effects=effects)
    tried = lambda r: {c.variant for c in r.chains if c.chain_id in r.run_order} - {BASELINE}  # noqa: E731
    assert len(tried(bet)) == len(effects) and len(tried(v)) <= 3
    by_id = {c.chain_id: c for c in v.chains}
    order = [by_id[i] for i in v.run_order]
    auto = next(i for i, c in enumerate(order) if c.auto)
    assert any(not c.auto and c.chain_id < order[auto].chain_id for c in order[auto + 1:])
    assert v.correct == 1 and v.wrong == 0


def test_gpu_slots_replay_the_loop_with_chains_at_once_and_score_more_of_them():
    """`opsdctl simulate --gpus-per-chain 1`: four 1-GPU chains at once through the same loop and
    gate; more chains scored than one at a time on all four GPUs (with the layout table's factors)."""
    for seed in (0, 1):
        whole = simulate_session("planner fifo", seed=seed)
        ones = simulate_session("planner fifo", seed=seed, gpus_per_chain=1)
        assert ones.succeeded > whole.succeeded and ones.cut == 0
        assert simulate_session("planner fifo", seed=seed, gpus_per_chain=4).succeeded == whole.succeeded
    res = simulate_session("verdicts", seed=2, gpus_per_chain=1)
    assert res.succeeded > 8 and res.idle_while_fits_s == 0.0 and res.report is not None
