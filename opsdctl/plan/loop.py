"""The worker loop, once: order the queue, admit against the budget, claim, hand to the executor,
collect what ended, idle or drain. `opsdctl worker` runs it over the store and a real executor
(opsdctl/daemon/worker.py); the simulator (opsdctl/sim/) runs this very class over an
in-memory queue, a fake clock and a fake executor, so its figures measure the code users run.

What the loop is given:
  gate      opsdctl.plan.gate.Gate: the order (the planner's: policy, auto-repeat), admission
  queue     ChainQueue: the queued chains in store order, and the two writes the loop makes
            (skip a chain with its reason, claim one `queued -> running`)
  executor  Executor (declared here, once): has_room() / start(id) / poll() -> [(id, State)] /
            busy() / close(); the local one runs each chain in a thread of its own on its own
            GPUs, the Ray one starts it on a node, the simulator's replays it on a fake clock
  clock     Clock: now() (monotonic seconds) and sleep(seconds)
The gate's `idle_reason()` (optional) says why nothing more is planned while budget is left
(an auto-repeat cap the user set); the loop logs it when it goes idle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from opsdctl.plan.gate import ChainInfo, Gate, Skip, Start, Wait
from opsdctl.store.states import State

IDLE_LOG_S = 60.0
BUSY_POLL_S = 0.5  # while chains run elsewhere (executor = "ray"): how often to look again
PICK_PASSES = 3  # gate orders per pick: one, and again after a pass that skipped chains


class ChainQueue(Protocol):
    def queued(self) -> list[ChainInfo]: ...  # store order: priority, then queue order

    def skip(self, chain_id: int, reason: str) -> bool: ...  # queued -> skipped; False if it moved on

    def claim(self, chain_id: int) -> bool: ...  # queued -> running; False if it moved on


class Executor(Protocol):
    """How claimed chains run: the worker's (opsdctl.daemon.executors) and the simulator's."""

    # None, or stage row -> KillReport | None: recovery's way to stop a dead worker's stage
    # processes on another machine (the Ray executor's)
    stop_remote_stage: Optional[Callable]

    def has_room(self) -> bool: ...  # may another chain start now (a free slot, a free node)?

    def start(self, chain_id: int, gpus: Optional[int] = None) -> None: ...  # run a claimed (`running`) chain
    # (`gpus`: the planner's wider slot for it, gate.Start)

    def poll(self) -> list[tuple[int, State]]: ...  # chains that ended since the last poll

    def busy(self) -> int: ...  # chains started and not ended yet

    def close(self) -> None: ...  # the worker leaves: stop what still runs, give resources back


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class WallClock:
    """The worker's clock; `sleep` wakes early when `stopped()` turns true (a signal)."""

    def __init__(self, stopped: Callable[[], bool] = lambda: False):
        self.stopped = stopped

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopped() and time.monotonic() < end:
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))


@dataclass(frozen=True)
class LoopOptions:
    drain: bool = False  # exit when nothing runnable is queued and nothing runs
    max_chains: Optional[int] = None  # exit after this many chains ended
    poll_s: float = 2.0  # idle: how often to look at the queue again


class WorkerLoop:
    def __init__(self, gate: Gate, queue: ChainQueue, executor: Executor, clock: Clock, *,
                 options: LoopOptions = LoopOptions(),
                 report: Callable[[str], None] = lambda msg: None,
                 activity: Callable[[str], None] = lambda text: None,
                 stopped: Callable[[], bool] = lambda: False,
                 hold: Callable[[], Optional[str]] = lambda: None):
        self.gate, self.queue, self.executor, self.clock = gate, queue, executor, clock
        self.options = options
        self.report, self.activity, self.stopped, self.hold = report, activity, stopped, hold
        self._holding: Optional[str] = None
        self.started: list[int] = []  # chain ids, in the order the loop started them

    def run(self) -> int:
        """Start chains while the executor has room; collect the ones that ended; drain or idle
        as asked. Returns the number of chains that ended."""
        opts, ex = self.options, self.executor
        ran = 0
        last_idle_note: Optional[float] = None
        idle = False
        while True:
            for chain_id, state in ex.poll():
                ran += 1
                self.activity(f"chain {chain_id}: {state}")
            if self.stopped():
                break
            busy = ex.busy()
            if opts.max_chains is not None and ran + busy >= opts.max_chains:
                if not busy:
                    break
                self.clock.sleep(BUSY_POLL_S)
                continue
            hold = self.hold()
            if hold is not None and ex.has_room() and self.queue.queued():
                # Unknown budget, never read: start nothing blind (chains that run go on).
                if hold != self._holding:
                    self._holding = hold
                    self.activity(f"holding: {hold}")
                self.clock.sleep(min(opts.poll_s, BUSY_POLL_S) if busy else opts.poll_s)
                continue
            self._holding = None
            wide = None
            if ex.has_room():
                picked, wait, wide = self.pick()
            elif busy or self.queue.queued():  # a slot frees up, or one is being reserved
                self.clock.sleep(BUSY_POLL_S)
                continue
            else:  # no room because nothing runs and nothing is queued
                picked, wait = None, None
            if picked is None:
                if wait is not None:
                    self.activity(f"waiting: {wait.reason}")
                    self.clock.sleep(min(wait.seconds, BUSY_POLL_S) if busy else wait.seconds)
                    continue
                if busy:  # others still run: they may end, or free room for what waits
                    self.clock.sleep(BUSY_POLL_S)
                    continue
                why = self._idle_reason()
                if opts.drain:
                    self.report(f"queue drained; {why}" if why else "queue drained")
                    break
                if not idle:
                    idle = True
                    self.activity(f"idle: {why}" if why else "idle: waiting for queued chains")
                if last_idle_note is None or self.clock.now() - last_idle_note > IDLE_LOG_S:
                    self.report(f"idle: {why} (Ctrl-C to stop)" if why else "idle: nothing queued (Ctrl-C to stop)")
                    last_idle_note = self.clock.now()
                self.clock.sleep(opts.poll_s)
                continue
            idle, last_idle_note = False, None
            self.started.append(picked)
            if wide:
                ex.start(picked, wide)
            else:
                ex.start(picked)
        return ran

    def _idle_reason(self) -> Optional[str]:
        fn = getattr(self.gate, "idle_reason", None)
        return fn() if fn is not None else None

    def pick(self) -> tuple[Optional[int], Optional[Wait], Optional[int]]:
        """Claim the first chain the gate starts, in the gate's order; mark the ones it skips. A
        pass that skipped chains asks the gate again (at most PICK_PASSES times): with them gone it
        may order otherwise (auto-repeat waits for the user's queued chains), so the loop neither
        idles a poll nor drains while something it would add fits. Returns (chain id, the
        shortest wait, the wider slot's GPUs the gate started it on)."""
        shortest_wait: Optional[Wait] = None
        for _ in range(PICK_PASSES):
            skipped = False
            for info in self.gate.order(self.queue.queued()):
                decision = self.gate.admit(info)
                if isinstance(decision, Skip):
                    if self.queue.skip(info.chain_id, decision.reason):
                        skipped = True
                        self.report(f"chain {info.chain_id} {info.variant}: skipped: {decision.reason}")
                    continue
                if isinstance(decision, Wait):
                    if shortest_wait is None or decision.seconds < shortest_wait.seconds:
                        shortest_wait = decision
                    continue
                if not isinstance(decision, Start):
                    raise TypeError(f"gate.admit returned {decision!r}; expected Start, Skip or Wait")
                if self.queue.claim(info.chain_id):
                    return info.chain_id, None, decision.gpus
            if not skipped:
                break
        return None, shortest_wait, None
