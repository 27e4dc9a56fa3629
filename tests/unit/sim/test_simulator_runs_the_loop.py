"""`opsdctl simulate` and benchmarks/simulate_session.py run the worker's own loop
(opsdctl.plan.loop.WorkerLoop): a bug injected in that loop changes what they report. And the
planner's auto-repeat rules the loop relies on: a cap only when the user set one, said when it
stops the worker; nothing of zero value queued."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import REPO
from support.gpus import NoFacts

from opsdctl.plan import loop as loop_mod
from opsdctl.sim.replay import simulate_session


def _last_admissible_first(monkeypatch):
    """The injected bug: the loop tries the gate's order backwards."""
    real_order = None

    def pick(self):
        nonlocal real_order
        gate = self.gate
        if real_order is None:
            real_order = type(gate).order
        ordered = real_order(gate, self.queue.queued())
        for info in reversed(ordered):
            if self.gate.admit(info).__class__.__name__ == "Start" and self.queue.claim(info.chain_id):
                return info.chain_id, None, None
        return None, None, None

    monkeypatch.setattr(loop_mod.WorkerLoop, "pick", pick)


def test_a_bug_in_the_loop_changes_the_simulators_output(monkeypatch):
    good = simulate_session("planner fifo", seed=3)
    assert good.run_order[:3] == [1, 2, 3]  # fifo: the queue as written
    _last_admissible_first(monkeypatch)
    bad = simulate_session("planner fifo", seed=3)
    assert bad.run_order != good.run_order and bad.run_order[0] == 14  # the x2 queue's last chain


def test_a_bug_in_the_loop_changes_the_benchmarks_output(monkeypatch, tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import simulate_session as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    args = ["--sessions", "2", "--effects", "0,3", "--policy", "planner fifo", "--policy", "fifo-by-hand x2"]
    bench.main([*args, "--out", str(tmp_path / "good")])
    _last_admissible_first(monkeypatch)
    bench.main([*args, "--out", str(tmp_path / "bad")])
    good = json.loads((tmp_path / "good" / "simulate.json").read_text())["policies"]["planner fifo"]
    bad = json.loads((tmp_path / "bad" / "simulate.json").read_text())["policies"]["planner fifo"]
    assert good["baseline_share"] != bad["baseline_share"]  # the baseline, queued first, now runs last


def _gate(scores=(55.4, 54.2), others=None, **settings):
    from opsdctl.config import Reference
    from opsdctl.plan.gate import ChainInfo
    from opsdctl.plan.planner import PlannerGate, PlannerSettings
    from opsdctl.stats.compare import RunRecord

    queued: list[str] = []

    def info(cid, v, auto=False):
        return ChainInfo(chain_id=cid, variant=v, variant_id=cid, variant_name=v, version=1, hash=v, seed=cid,
                         repeat=0, priority=0, profile="p", hparams={}, method={}, auto=auto)

    class Facts(NoFacts):
        def runs(self):  # candidate "a"'s scores (and `others`: {variant: scores})
            out = [RunRecord("a", i, y, 12, 30, None, None, False) for i, y in enumerate(scores, 1)]
            for v, ys in (others or {}).items():
                out += [RunRecord(v, 50 + len(out), y, 12, 30, None, None, False) for y in ys]
            return out

        def queue_repeat(self, variant, why):
            queued.append(variant)
            return info(100 + len(queued), variant, auto=True)

    messages: list[str] = []
    gate = PlannerGate(PlannerSettings(policy="adaptive", auto_repeat=True, baseline="baseline",
                                       reference=Reference(54.22, 1.48, 5), **settings),
                       Facts(), budget_left=lambda: 140 * 60.0, report=messages.append)
    return gate, queued, messages, info


def test_auto_repeat_has_no_cap_unless_the_user_sets_one_and_then_says_so():
    gate, queued, messages, _ = _gate()
    for _ in range(8):  # no default cap: the worker queues while a repeat has value and fits
        assert gate.order([]) and gate.idle_reason() is None
    assert len(queued) == 8
    gate, queued, messages, _ = _gate(auto_repeat_max=2)
    assert gate.order([]) and gate.order([]) and gate.order([]) == []
    assert queued == ["a", "a"]
    note = "auto-repeat cap 2 reached; 140 min left unused: raise [planner] auto_repeat_max"
    assert gate.idle_reason() == note and messages[-1] == note
    gate.order([])
    assert messages.count(note) == 1  # said once, not at every look at the queue


def test_an_auto_repeat_chain_goes_after_the_users_queue():
    gate, queued, _, info = _gate()
    order = gate.order([info(1, "new"), info(2, "a", auto=True), info(3, "b")])
    assert [c.chain_id for c in order] == [1, 3, 2] and queued == []  # users first; nothing more queued
    # a user chain of a loser ("b", well below): the ranking's pick is a repeat of the leader "a",
    # which waits behind the user's chain, unless the user opted in
    gate, queued, _, info = _gate(scores=(54.6, 54.2), others={"b": (50.0, 50.6)})
    assert [c.chain_id for c in gate.order([info(1, "b")])] == [1] and queued == []
    gate, queued, _, info = _gate(scores=(54.6, 54.2), others={"b": (50.0, 50.6)}, auto_repeat_first=True)
    order = gate.order([info(1, "b")])
    assert order[0].auto and queued == ["a"]  # the opt-in


def test_no_zero_value_chain_is_queued():
    """A clear leader (+7.8 points over the published mean in three runs): no run can change what is
    submitted, so `opsdctl advise` ranks `stop` first, nothing is queued and the worker idles with
    the time left, rather than spend it on a chain worth nothing."""
    gate, queued, _, _ = _gate(scores=(62.4, 61.6, 62.0))
    assert gate.order([]) == [] and queued == [] and gate.plan.extra is None
    assert "no repeat has value in the time left (advise: stop" in gate.idle_reason()  # log and status say why
    gate, queued, _, _ = _gate()  # a close race: a repeat has value
    assert gate.order([]) and queued == ["a"] and gate.plan.extra_why.startswith("advise: one more run of a")


def test_the_benchmark_refuses_an_unknown_policy(tmp_path, capsys):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import simulate_session as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    with pytest.raises(SystemExit) as e:
        bench.main(["--sessions", "1", "--policy", "adaptve", "--out", str(tmp_path)])
    assert e.value.code == 2 and "unknown policy 'adaptve'" in capsys.readouterr().err
    assert not (tmp_path / "simulate.json").exists()


def test_four_chains_at_once_try_every_idea_before_repeating_one():
    """One GPU per chain (four slots): the free slots take different first runs, not the x2 queue's
    two chains of one variant (each slot's pick counts the chains running now)."""
    res = simulate_session("adaptive", seed=40001, gpus_per_chain=1)
    by_id = {c.chain_id: c for c in res.chains}
    order = [by_id[i].variant for i in res.run_order]
    ideas = sorted({c.variant for c in res.chains if c.variant != "baseline"})
    first_wave = order[:len(ideas) + 1]
    assert sorted(set(first_wave)) == sorted(["baseline", *ideas]) and len(set(first_wave)) == len(first_wave), order
    assert len(res.report.full) == len(ideas)
