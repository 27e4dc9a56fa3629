"""The planner with GPU slots: durations per layout (history keyed by GPU count, the layout factor
before any), the projected timeline per slot, admission on the slot a chain will get, a wider
slot near the deadline, and actions priced in GPU-minutes."""

from __future__ import annotations

import pytest

from opsdctl.plan import advise, layout_costs
from opsdctl.plan.admission import fits_after_wait
from opsdctl.plan.durations import Estimate, Estimator, Sample, cost_key, gpus_of_text
from opsdctl.plan.facts import LiveChain, NoFacts
from opsdctl.plan.gate import ChainInfo, Skip, Start
from opsdctl.plan.planner import PlannerGate, PlannerSettings
from opsdctl.plan.slots import Layout
from opsdctl.plan.timeline import Queued, Running, project, slot_timelines

MIN = 60.0
P = "qwen3-1.7b"
ONES = Layout((0, 1, 2, 3), 1)


def est(stage, minutes):
    return Estimate(stage, stage, 0, minutes * MIN, minutes * MIN, "default")


def q(cid, train=10.0, evaluate=20.0):
    return Queued(cid, f"v{cid}", est("train", train), est("eval", evaluate))


def info(cid) -> ChainInfo:
    return ChainInfo(cid, f"v{cid}", cid, f"v{cid}", 1, "h", 0, 0, 0, P, {"max_completion_length": 1024}, {})


# --- durations per layout ----------------------------------------------------------------


def test_history_is_keyed_by_gpu_count_and_defaults_scale_by_the_layout_factor():
    assert cost_key("train", P, {"max_completion_length": 1024}, gpus=1) == "train|qwen3-1.7b|mcl=1024|gpus=1"
    assert cost_key("eval", P) == "eval|qwen3-1.7b"  # no GPUs (a CPU profile): the key as it always was
    assert (gpus_of_text("0,1,2,3"), gpus_of_text(""), gpus_of_text(None)) == (4, 0, 0)
    four = [Sample("train", cost_key("train", P, {"max_completion_length": 1024}, gpus=4), 17 * MIN)]
    e = Estimator(four, {"train": 19 * MIN, "eval": 27 * MIN})
    assert e.stage("train", P, {"max_completion_length": 1024}, gpus=4).median_s == 17 * MIN
    one = e.stage("train", P, {"max_completion_length": 1024}, gpus=1)  # no 1-GPU history: default x factor
    assert one.n == 0 and one.median_s == pytest.approx(19 * MIN * layout_costs.factor("train", 1), rel=1e-12)
    assert "layout" in one.source
    # a 4-GPU history of other knobs does not raise a 1-GPU estimate's floor
    other = [Sample("train", cost_key("train", P, {"max_completion_length": 4096}, gpus=4), 80 * MIN)]
    e2 = Estimator(other, {"train": 19 * MIN, "eval": 27 * MIN})
    assert e2.stage("train", P, {"max_completion_length": 1024}, gpus=1).high_s == pytest.approx(
        19 * MIN * layout_costs.factor("train", 1), rel=1e-12)


def test_layout_factors_are_one_table_and_interpolate_on_log_gpus():
    assert layout_costs.factor("eval", 0) == 1.0 and layout_costs.factor("train", layout_costs.REFERENCE_GPUS) == 1.0
    f2, f4 = layout_costs.FACTORS["train"][2], layout_costs.FACTORS["train"][4]
    assert f4 < layout_costs.factor("train", 3) < f2  # between its neighbours, on log(k)
    assert layout_costs.gpu_minutes({"train": 60.0, "eval": 120.0}, {"train": 4, "eval": 1}) == pytest.approx(6.0)


# --- the projected timeline on slots -----------------------------------------------------------


def test_four_one_gpu_slots_run_four_chains_at_once_and_the_fifth_waits_for_the_first_free():
    entries = project(None, [], [q(1), q(2), q(3), q(4), q(5, 5, 5)], layout=ONES)
    assert [e.start_in_s for e in entries[:4]] == [0.0] * 4 and sorted(e.gpus for e in entries[:4]) == [
        (0,), (1,), (2,), (3,)]
    assert all(e.end_in_s == 30 * MIN for e in entries[:4])
    assert entries[4].start_in_s == 30 * MIN and entries[4].end_in_s == 40 * MIN
    slots = slot_timelines(entries, ONES)
    assert [s["gpus"] for s in slots] == [[0], [1], [2], [3]]
    assert sum(len(s["timeline"]) for s in slots) == 10  # every chain's two stages, each on its slot
    assert [x["stage"] for x in slots[0]["timeline"]] == ["train", "eval", "train", "eval"]


def test_evals_one_per_gpu_while_the_next_train_waits_for_its_four():
    mixed = Layout((0, 1, 2, 3), None, (("eval", 1),))
    entries = project(None, [], [q(c) for c in range(1, 6)], layout=mixed)
    trains = [e.stages[0] for e in entries]
    assert [t.start_in_s / MIN for t in trains] == [0, 10, 20, 30, 60]  # one at a time; chain 5 after the evals
    evals = [e.stages[1] for e in entries[:4]]
    assert sorted(ev.gpus for ev in evals) == [(0,), (1,), (2,), (3,)]
    assert all(ev.start_in_s == 40 * MIN for ev in evals)  # behind the trains already in line, then together


def test_running_chains_hold_their_gpus_and_serial_is_the_queue_back_to_back():
    running = [Running(1, "a", "eval", 5 * MIN, est("train", 10), est("eval", 20), (2,))]
    entries = project(None, running, [q(2), q(3), q(4), q(5)], layout=ONES)
    assert entries[0].end_in_s == 15 * MIN and entries[0].gpus == (2,)
    assert sorted(e.gpus for e in entries[1:4]) == [(0,), (1,), (3,)]  # the free slots
    assert entries[4].start_in_s == 15 * MIN and entries[4].gpus == (2,)  # the first slot to free up
    serial = project(None, running[:0], [q(2), q(3)], layout=Layout((0, 1, 2, 3)))
    assert [(e.start_in_s, e.end_in_s) for e in serial] == [(0.0, 30 * MIN), (30 * MIN, 60 * MIN)]
    assert serial[0].gpus == (0, 1, 2, 3)


# --- admission on the slot a chain will get ------------------------------------------------


class Facts(NoFacts):
    def __init__(self, live=()):
        super().__init__("baseline")
        self.live = list(live)

    def running(self):
        return list(self.live)


def _gate(layout, usable_min, live=(), widen=()):
    return PlannerGate(PlannerSettings(layout=layout, widen=widen), Facts(live), budget_left=lambda: usable_min * MIN)


def test_a_chain_is_admitted_when_it_finishes_on_its_slot_in_time():
    one = 19 * layout_costs.factor("train", 1) + 27 * layout_costs.factor("eval", 1)  # minutes on one GPU
    gate = _gate(ONES, one + 1)
    assert isinstance(gate.admit(info(1)), Start)
    gate = _gate(ONES, one - 1)
    d = gate.admit(info(1))
    assert isinstance(d, Skip) and d.reason.startswith(f"needs ~{one:.0f} min")
    assert fits_after_wait(60, 100, 90).reason == "needs ~1 min after ~40 s for its GPUs, 1.5 min left"


def test_a_chain_that_must_wait_for_its_gpus_counts_the_wait():
    mixed = Layout((0, 1, 2, 3), None, (("eval", 1),))
    busy = [LiveChain(info(1), "train", 0.0, (0, 1, 2, 3))]  # a 4-GPU train just started: 19 min
    need = 19 + 27 * layout_costs.factor("eval", 1)
    gate = _gate(mixed, need + 10, busy)  # fits alone, not behind a 19-minute train
    d = gate.admit(info(2))
    assert isinstance(d, Skip) and "for its GPUs" in d.reason
    assert isinstance(_gate(mixed, need + 20, busy).admit(info(2)), Start)


def test_near_the_deadline_a_chain_that_no_longer_fits_its_slot_runs_wider():
    usable = 19 * layout_costs.factor("train", 2) + 27 * layout_costs.factor("eval", 2) + 1  # fits on 2, not 1
    d = _gate(ONES, usable, widen=("train", "eval")).admit(info(1))
    assert d == Start(gpus=2)
    assert isinstance(_gate(ONES, usable).admit(info(1)), Skip)  # its commands ignore {num_gpus}: no wider slot
    busy = [LiveChain(info(9), "train", 0.0, (0,)), LiveChain(info(8), "train", 0.0, (2,))]
    assert isinstance(_gate(ONES, usable, busy, widen=("train", "eval")).admit(info(1)), Skip)  # no pair is free


# --- GPU-minutes ---------------------------------------------------------------------------


def test_actions_are_priced_in_gpu_minutes_of_their_slot():
    costs = advise.Costs(chain_s=40 * MIN, eval_s=30 * MIN, screen_s=20 * MIN, train_s=10 * MIN,
                         train_gpus=4, eval_gpus=1, slots=4)
    assert costs.gpu_minutes(costs.chain_s) == pytest.approx(10 * 4 + 30 * 1)
    assert costs.gpu_minutes(costs.eval_s, with_train=False) == pytest.approx(30)
    a = advise.Advice(advise.Action.REEVAL, "x", 30.0, True, 0.3, gpu_minutes=30.0)
    b = advise.Advice(advise.Action.REPEAT, "x", 40.0, True, 0.6, gpu_minutes=70.0)
    assert a.rate > b.rate  # per wall minute the repeat would rank first
    assert a.to_json()["gpu_minutes"] == 30.0
    plain = advise.Costs(40 * MIN, 30 * MIN, 20 * MIN)  # no GPUs: minutes, as before
    assert plain.gpu_minutes(plain.chain_s) == pytest.approx(40)
