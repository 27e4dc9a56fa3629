"""The simulator with GPU slots (`opsdctl simulate --gpus-per-chain N`): several chains at once on
the session's four GPUs, each stage on its own.

`SlotExecutor` stands where the local executor stands: the worker loop claims up to
`layout.max_chains` chains at once and it runs them, event by event on the session's fake clock:
each stage takes its GPUs through the pool's own rule (first come first served, aligned blocks:
opsdctl.plan.slots.pick_block), asks the gate what a ChainRun asks it (grant before each stage,
on_progress at every look, released after), and lasts a drawn duration for its GPU count:
the world's 4-GPU range times the layout factor (opsdctl.plan.layout_costs, the one table the
planner's estimates read too; placeholders until measured). A stage that would run past the
budget is cut there. `SlotClock` sleeps to the next stage end while chains run: nothing the loop
could do changes before it. The gate sees the running chains through `Session.live`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Optional

from opsdctl.plan.durations import Sample, cost_key
from opsdctl.plan.facts import LiveChain
from opsdctl.plan.gate import Grant
from opsdctl.plan.layout_costs import factor
from opsdctl.plan.planner import PlannerGate
from opsdctl.plan.slots import Layout, pick_block
from opsdctl.sim.session import Session, SessionResult, SimChain
from opsdctl.sim.world import BASELINE, EVAL_LOAD_MIN, HPARAMS, K, LOOKS, N_PROBLEMS, PROFILE, STAGE_GAP_S
from opsdctl.store.states import State

DEVICES = (0, 1, 2, 3)  # the session's GPUs


@dataclass
class _Run:
    chain: SimChain
    stages: list  # stage names left
    widen: Optional[int] = None
    stage: Optional[str] = None  # the stage holding GPUs now (None: waiting in line)
    started: float = 0.0  # when it started
    gpus: tuple = ()
    last_gpus: tuple = ()
    seconds: float = 0.0  # its drawn duration
    estimate: Optional[float] = None
    admitted_high: float = 0.0
    spent: float = 0.0  # the chain's stage seconds so far
    stop: object = None  # the gate's Stop at a look
    samples: object = None
    cut: bool = False
    extra: dict = field(default_factory=dict)


class SlotExecutor:
    stop_remote_stage = None

    def __init__(self, s: Session, res: SessionResult, gate: PlannerGate, layout: Layout):
        self.s, self.res, self.gate, self.layout = s, res, gate, layout
        self.held: dict[int, int] = {}
        self.line: list[_Run] = []
        self.ends: list[tuple[float, int, int]] = []  # (t, seq, chain id)
        self.live: dict[int, _Run] = {}
        self._seq = 0
        self._ended: list[tuple[int, State]] = []
        s.live = self.running

    # --- the loop's seam --------------------------------------------------------------------

    def has_room(self) -> bool:
        return len(self.live) < self.layout.max_chains

    def busy(self) -> int:
        return len(self.live)

    def start(self, chain_id: int, gpus: Optional[int] = None) -> None:
        c = self.s.chains[chain_id - 1]
        info = self.s.info(c)
        res = self.res
        res.started += 1
        res.auto_repeats += int(c.auto)
        res.reevals += int(c.eval_only)
        res.baseline_chains += int(c.variant == BASELINE)
        res.run_order.append(chain_id)
        run = _Run(c, ([] if c.eval_only else ["train"]) + ["eval"], gpus)
        run.admitted_high = sum(e.high_s for e in self.gate.chain_estimate(info, gpus or 0))
        self.live[chain_id] = run
        self.line.append(run)
        self._serve()

    def poll(self) -> list[tuple[int, State]]:
        while self.ends and self.ends[0][0] <= self.s.t:
            _, _, cid = heapq.heappop(self.ends)
            self._stage_ended(self.live[cid])
            self._serve()
        out, self._ended = self._ended, []
        return out

    def close(self) -> None:
        return None

    def next_end(self) -> Optional[float]:
        return self.ends[0][0] if self.ends else None

    def running(self) -> list[LiveChain]:
        """What the gate's Facts say runs now (Session.live)."""
        return [LiveChain(self.s.info(r.chain), r.stage, max(0.0, self.s.t - r.started) if r.stage else 0.0, r.gpus)
                for _, r in sorted(self.live.items())]

    # --- stages -----------------------------------------------------------------------------

    def _count(self, run: _Run, stage: str) -> int:
        k = self.layout.gpus_of(stage)
        return max(k, run.widen) if run.widen and stage in self.gate.settings.widen else k

    def _serve(self) -> None:
        """The pool's line, first come first served: the head starts once its block is free."""
        while self.line:
            run = self.line[0]
            stage = run.stages[0]
            gpus = pick_block(self.layout, self.held, self._count(run, stage), run.last_gpus)
            if gpus is None:
                return
            self.line.pop(0)
            self._begin(run, stage, gpus)

    def _begin(self, run: _Run, stage: str, gpus: tuple) -> None:
        s, res, gate = self.s, self.res, self.gate
        c, info = run.chain, s.info(run.chain)
        g = gate.grant(info, stage)
        if not isinstance(g, Grant):
            c.state, c.reason = "skipped", g.reason
            if stage == "train":
                res.skipped_admission += 1
            else:
                res.eval_skipped += 1
            self._end(run, State.SKIPPED)
            return
        run.stages.pop(0)
        for d in gpus:
            self.held[d] = c.chain_id
        run.stage, run.gpus, run.started, run.estimate = stage, gpus, s.t, g.estimate_seconds
        lo_hi = s.world.train_min if stage == "train" else s.world.eval_min
        seconds = s.draw(lo_hi) * factor(stage, len(gpus))
        res.estimate_overruns += int(g.estimate_seconds is not None and seconds > g.estimate_seconds)
        run.seconds = seconds
        if stage == "eval":
            seconds = self._looks(run, seconds)
        run.cut = s.t + seconds > s.budget_s
        run.extra["ran"] = min(seconds, s.budget_s - s.t)
        self._seq += 1  # its GPUs are held STAGE_GAP_S more (release wait, the next start); never past the budget
        heapq.heappush(self.ends, (min(s.budget_s, s.t + seconds + STAGE_GAP_S), self._seq, c.chain_id))

    def _looks(self, run: _Run, seconds: float) -> float:
        """The eval's scores (a fresh training, or a re-eval's fresh samples) and the gate's looks;
        the seconds it runs (shorter when the gate stops it at a look)."""
        s, c = self.s, run.chain
        if c.eval_only:
            run.samples = s.world.evaluate(s.rng, s.chains[c.train_of - 1].u)
        else:
            c.u = s.world.train(s.rng, s.effects[c.variant] + s.offset)
            run.samples = s.world.evaluate(s.rng, c.u)
        info = s.info(c)
        for k in LOOKS:
            rec = {"done": N_PROBLEMS * k, "total": N_PROBLEMS * K, "look_k": k,
                   "problems": [{"id": f"P{i}", "correct": int(x), "samples": k}
                                for i, x in enumerate(run.samples[:, :k].sum(axis=1))]}
            run.stop = self.gate.on_progress(info, "eval", rec)
            if run.stop is not None:
                return EVAL_LOAD_MIN * 60.0 + (seconds - EVAL_LOAD_MIN * 60.0) * k / K
        return seconds

    def _stage_ended(self, run: _Run) -> None:
        s, res, c = self.s, self.res, run.chain
        ran, n = run.extra["ran"], len(self.layout.devices)
        res.busy_s += ran * len(run.gpus) / n  # the budget's GPU time, in whole-machine seconds
        res.last_end_s = max(res.last_end_s, min(s.t, s.budget_s))
        for d in run.gpus:
            self.held.pop(d, None)
        stage, run.last_gpus, run.stage, run.gpus = run.stage, run.gpus, None, ()
        if run.cut:
            c.state, res.cut = "cut", res.cut + 1
            self._end(run, State.INTERRUPTED)
            return
        run.spent += ran + (STAGE_GAP_S if stage == "train" else 0.0)
        self.gate.released(s.info(c), stage, [])
        if stage == "train":
            s.stage_samples.append(Sample("train", cost_key("train", PROFILE, HPARAMS, gpus=len(run.last_gpus)),
                                          run.seconds, run.estimate, c.chain_id))
            self.line.append(run)
            return
        res.chain_overruns += int(run.spent > run.admitted_high)
        if run.stop is not None:
            c.state, c.reason = "stopped-futile", run.stop.reason
            res.futility_stops += 1
            res.futility_dropped_winners += int(s.effects[c.variant] > 0)
            self._end(run, State.STOPPED_FUTILE)
            return
        s.stage_samples.append(Sample("eval", cost_key("eval", PROFILE, HPARAMS, gpus=len(run.last_gpus)),
                                      run.seconds, run.estimate, c.chain_id))
        s.record(c, run.samples)
        c.state = "succeeded"
        res.succeeded += 1
        res.useful_s += run.spent * len(run.last_gpus) / n
        self._end(run, State.SUCCEEDED)

    def _end(self, run: _Run, state: State) -> None:
        self.live.pop(run.chain.chain_id, None)
        self._ended.append((run.chain.chain_id, state))


class SlotClock:
    """The fake clock over a SlotExecutor: sleeping while chains run goes to the next stage end
    (nothing the loop could do changes before it); otherwise it advances as asked."""

    def __init__(self, s: Session, executor: SlotExecutor):
        self.s, self.ex = s, executor

    def now(self) -> float:
        return self.s.t

    def sleep(self, seconds: float) -> None:
        nxt = self.ex.next_end() if self.ex.busy() else None
        target = nxt if nxt is not None else self.s.t + max(0.0, seconds)
        self.s.t = min(self.s.budget_s, max(self.s.t, target))


def slot_layout(gpus_per_chain: int) -> Layout:
    """The session's four GPUs in slots of `gpus_per_chain`."""
    return Layout(DEVICES, gpus_per_chain)
