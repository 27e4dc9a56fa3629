"""Admission under a fake clock (PlannerGate with in-memory facts): no chain starts that cannot
finish (over whole simulated sessions: tests/integration/test_sim_admission.py), skips carry
reasons, a shorter chain is admitted when a longer one is not, the eval is re-checked before it
starts; and the projected timeline."""

from __future__ import annotations

from opsdctl.plan.admission import admit_chain, admit_eval, fits, minutes_text
from opsdctl.plan.durations import Estimate, Sample, cost_key
from opsdctl.plan.facts import NoFacts
from opsdctl.plan.gate import ChainInfo, Grant, Skip, Start
from opsdctl.plan.planner import PlannerGate, PlannerSettings
from opsdctl.plan.timeline import Queued, Running, project

MIN = 60.0
P = "qwen3-1.7b"


def test_fit_reasons():
    assert fits(46 * MIN, 31 * MIN).reason == "needs ~46 min, 31 min left"
    assert admit_chain(19 * MIN, 27 * MIN, 46 * MIN).ok
    assert not admit_chain(19 * MIN, 27 * MIN, 45.9 * MIN).ok
    assert admit_chain(19 * MIN, 27 * MIN, None).ok  # no budget: everything fits
    assert admit_eval(27 * MIN, 20 * MIN).reason == "eval needs ~27 min, 20 min left"
    assert fits(100, -50).reason == "needs ~1.7 min, 0 s left"
    assert fits(40, 12).reason == "needs ~40 s, 12 s left" and fits(30, 90).ok
    assert minutes_text(6 * MIN) == "6 min"


class Facts(NoFacts):
    def __init__(self, samples=()):
        super().__init__("baseline")
        self._samples = list(samples)

    def samples(self):
        return list(self._samples)

    def save_plan(self, doc):
        self.plan = doc


def info(cid, mcl=1024, variant=None) -> ChainInfo:
    v = variant or f"v{cid}"
    return ChainInfo(cid, v, cid, v, 1, "h", 0, 0, 0, P, {"max_completion_length": mcl}, {})


class Clock:
    """The budget ends at `end`; usable = end - now - margin."""

    def __init__(self, end_s: float, margin_s: float = 5 * MIN):
        self.now, self.end, self.margin = 0.0, end_s, margin_s

    def usable(self):
        return self.end - self.now - self.margin


def test_skip_long_chain_admit_a_shorter_one():
    hist = [Sample("train", cost_key("train", P, {"max_completion_length": 512}), 8 * MIN),
            Sample("eval", cost_key("eval", P), 20 * MIN)]
    clock = Clock(41 * MIN)  # 36 min usable
    gate = PlannerGate(PlannerSettings(defaults_s=(("train", 19 * MIN), ("eval", 27 * MIN))), Facts(hist),
                       budget_left=clock.usable, clock=lambda: clock.now)
    long_, short = info(1, 4096), info(2, 512)
    order = gate.order([long_, short])
    assert [c.chain_id for c in order] == [1, 2]
    d = gate.admit(long_)  # mcl=4096 has no history: default 19 min (>= 8 x 1.15), eval 20 x 1.15 = 23 min
    assert isinstance(d, Skip) and d.reason == "needs ~42 min, 36 min left"
    assert isinstance(gate.admit(short), Start)  # 8 x 1.15 + 23 = 32.2 min fits


def test_eval_rechecked_before_it_starts():
    clock = Clock(60 * MIN)
    gate = PlannerGate(PlannerSettings(), Facts(), budget_left=clock.usable, clock=lambda: clock.now)
    c = info(1)
    gate.order([c])
    assert isinstance(gate.admit(c), Start)  # 55 min usable >= 46
    g = gate.grant(c, "train")
    assert isinstance(g, Grant) and g.estimate_seconds == 19 * MIN
    clock.now = 31 * MIN  # training ran long: 24 min usable
    d = gate.grant(c, "eval")
    assert isinstance(d, Skip) and d.reason == "eval needs ~27 min, 24 min left"
    clock.now = 27 * MIN  # 28 min usable
    g = gate.grant(c, "eval")
    assert isinstance(g, Grant) and g.estimate_seconds == 27 * MIN


def test_train_rechecked_after_time_passes_and_exhausted_budget():
    clock = Clock(60 * MIN)
    gate = PlannerGate(PlannerSettings(), Facts(), budget_left=clock.usable, clock=lambda: clock.now)
    c = info(1)
    gate.order([c])
    assert isinstance(gate.admit(c), Start)
    clock.now = 10 * MIN  # e.g. the GPUs made it wait
    assert gate.grant(c, "train").reason == "needs ~46 min, 45 min left"
    clock.now = 60 * MIN
    assert gate.admit(c).reason.startswith("budget exhausted")


def E(stage, med, high):
    return Estimate(stage, stage, 1, med * MIN, high * MIN, "history")


def test_projected_timeline():
    run = Running(1, "a", "train", 10 * MIN, E("train", 18, 20), E("eval", 25, 28))
    qs = [Queued(2, "b", E("train", 18, 20), E("eval", 25, 28)),
          Queued(3, "c", E("train", 18, 20), E("eval", 25, 28)),
          Queued(4, "d", E("train", 2, 3), E("eval", 3, 4)),
          Queued(5, "e", E("train", 18, 20), E("eval", 25, 28))]
    out = project(110 * MIN, [run], qs, skips={5: "verdict worse"})
    by = {e.chain_id: e for e in out}
    assert by[1].end_in_s == (8 + 25) * MIN  # 8 min of train left (median), then the eval
    assert (by[2].start_in_s, by[2].end_in_s) == (33 * MIN, 76 * MIN) and by[2].fits
    assert not by[3].fits and by[3].reason == "will not fit: needs ~48 min, 34 min left at its turn"
    assert by[3].start_in_s is None
    assert by[4].fits and by[4].start_in_s == 76 * MIN  # a shorter chain fills the gap
    assert by[5].reason == "verdict worse" and not by[5].fits
    assert project(None, [], qs[:1])[0].fits  # no budget: everything fits
