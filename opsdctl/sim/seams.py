"""The worker loop's seams over a simulated session: its clock, its queue and a fake executor.

The loop (opsdctl.plan.loop.WorkerLoop) runs unchanged over them, as it runs over the daemon's
store, local executor and wall clock.
"""

from __future__ import annotations

from typing import Optional

from opsdctl.plan.durations import Sample, cost_key
from opsdctl.plan.gate import ChainInfo, Grant, Stop
from opsdctl.plan.planner import PlannerGate
from opsdctl.sim.session import Session, SessionResult, SimChain, run_stage
from opsdctl.sim.world import BASELINE, EVAL_LOAD_MIN, HPARAMS, K, LOOKS, N_PROBLEMS, PROFILE, STAGE_GAP_S
from opsdctl.store.states import State


class SimClock:
    """The fake clock: the session's simulated seconds; sleeping advances it."""

    def __init__(self, s: Session):
        self.s = s

    def now(self) -> float:
        return self.s.t

    def sleep(self, seconds: float) -> None:
        self.s.t = min(self.s.budget_s, self.s.t + max(0.0, seconds))


class SimQueue:
    """The loop's queue over the session's chains (in queue order, as the store lists them)."""

    def __init__(self, s: Session, res: SessionResult, gate: PlannerGate):
        self.s, self.res, self.gate = s, res, gate

    def queued(self) -> list[ChainInfo]:
        return [self.s.info(c) for c in self.s.queued()]

    def skip(self, chain_id: int, reason: str) -> bool:
        c = self.s.chains[chain_id - 1]
        if c.state != "queued":
            return False
        c.state, c.reason = "skipped", reason
        is_policy = self.gate.plan is not None and chain_id in self.gate.plan.skips
        self.res.skipped_policy += int(is_policy)
        self.res.skipped_admission += int(not is_policy)
        return True

    def claim(self, chain_id: int) -> bool:
        c = self.s.chains[chain_id - 1]
        if c.state != "queued":
            return False
        c.state = "running"
        return True


class SimExecutor:
    """The fake executor: runs a claimed chain to its end inside start(), as the local one does,
    asking the gate what the local executor asks it (grant before each stage, released after,
    on_progress at every look), with drawn durations and scores instead of processes."""

    def __init__(self, s: Session, res: SessionResult, gate: PlannerGate):
        self.s, self.res, self.gate = s, res, gate
        self._ended: list[tuple[int, State]] = []

    def has_room(self) -> bool:
        return True

    def busy(self) -> int:
        return 0

    def poll(self) -> list[tuple[int, State]]:
        out, self._ended = self._ended, []
        return out

    def start(self, chain_id: int) -> None:
        self._ended.append((chain_id, self._run(self.s.chains[chain_id - 1])))

    def _run(self, c: SimChain) -> State:
        s, res, gate = self.s, self.res, self.gate
        info = s.info(c)
        res.started += 1
        res.auto_repeats += int(c.auto)
        res.reevals += int(c.eval_only)
        res.baseline_chains += int(c.variant == BASELINE)
        res.run_order.append(c.chain_id)
        admitted_high = sum(e.high_s for e in gate.chain_estimate(info))
        tr = 0.0
        if not c.eval_only:
            g = gate.grant(info, "train")
            if not isinstance(g, Grant):
                c.state, c.reason = "skipped", g.reason
                res.skipped_admission += 1
                return State.SKIPPED
            tr = s.draw(s.world.train_min)
            res.estimate_overruns += int(g.estimate_seconds is not None and tr > g.estimate_seconds)
            if not run_stage(s, res, tr):
                c.state, res.cut = "cut", res.cut + 1
                return State.INTERRUPTED
            s.stage_samples.append(Sample("train", cost_key("train", PROFILE, HPARAMS), tr, g.estimate_seconds, c.chain_id))
            gate.released(info, "train", [])
            s.t += STAGE_GAP_S
        g = gate.grant(info, "eval")
        if not isinstance(g, Grant):
            c.state, c.reason = "skipped", g.reason
            res.eval_skipped += 1
            return State.SKIPPED
        ev = s.draw(s.world.eval_min)
        res.estimate_overruns += int(g.estimate_seconds is not None and ev > g.estimate_seconds)
        if c.eval_only:  # fresh samples of the checkpoint chain `train_of` trained
            samples = s.world.evaluate(s.rng, s.chains[c.train_of - 1].u)
        else:
            c.u = s.world.train(s.rng, s.effects[c.variant] + s.offset)
            samples = s.world.evaluate(s.rng, c.u)
        stop: Optional[Stop] = None
        at = ev
        for k in LOOKS:
            rec = {"done": N_PROBLEMS * k, "total": N_PROBLEMS * K, "look_k": k,
                   "problems": [{"id": f"P{i}", "correct": int(x), "samples": k}
                                for i, x in enumerate(samples[:, :k].sum(axis=1))]}
            stop = gate.on_progress(info, "eval", rec)
            if stop is not None:
                at = EVAL_LOAD_MIN * 60.0 + (ev - EVAL_LOAD_MIN * 60.0) * k / K
                break
        if not run_stage(s, res, at):
            c.state, res.cut = "cut", res.cut + 1
            return State.INTERRUPTED
        res.chain_overruns += int(tr + (STAGE_GAP_S if tr else 0.0) + at > admitted_high)
        gate.released(info, "eval", [])
        s.t += STAGE_GAP_S
        if stop is not None:
            c.state, c.reason = "stopped-futile", stop.reason
            res.futility_stops += 1
            res.futility_dropped_winners += int(s.effects[c.variant] > 0)
            return State.STOPPED_FUTILE
        s.stage_samples.append(Sample("eval", cost_key("eval", PROFILE, HPARAMS), ev, g.estimate_seconds, c.chain_id))
        s.record(c, samples)
        c.state = "succeeded"
        res.succeeded += 1
        res.useful_s += tr + ev
        return State.SUCCEEDED

