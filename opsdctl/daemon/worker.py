"""`opsdctl worker`: the one process per store that runs queued chains (one at a time, or as many
at once as the GPU layout holds: gpus_per_chain).

Start-up: take the store's worker lock (a second worker exits naming the holder), record this
worker run, start the budget clock (hours budgets), then recover: every chain still marked
`running` was left by a worker that died; its stage processes, when still alive and provably
ours, are stopped (orphans hold GPU memory), and the chain is marked `interrupted` and
re-queued as a fresh chain pointing at it.

Loop (opsdctl/plan/loop.py, the one loop; the simulator runs it too): ask the gate for the run
order, admit the first chain it starts, claim it with a guarded `queued -> running`, and hand it to the executor (opsdctl/daemon/executors.py: `local` runs it here
in a thread of its own, on its own GPUs; `ray` starts it on a free node slot of a Ray cluster).
With --drain the worker exits when nothing runnable is queued and nothing runs. SIGINT/SIGTERM
stop every running stage's process group and mark each chain `interrupted`, re-queued as after a
SIGKILL (finished work salvaged: a trained chain resumes at its eval; `opsdctl cancel` drops it);
a second signal skips the TERM grace period.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

from opsdctl.config import Config
from opsdctl.plan.budget import CLOCK_KEY, budget_now
from opsdctl.plan.budget_keeper import BudgetKeeper, forget_deadline, hold_reason
from opsdctl.plan.gate import ChainInfo, Gate, chain_info
from opsdctl.plan.loop import LoopOptions, WallClock, WorkerLoop
from opsdctl.plan.planner import make_planner_gate
from opsdctl.errors import EnvironmentProblem, UserError
from opsdctl.daemon import disk_reserve, procs, recipe_file
from opsdctl.daemon.env_errors import environment_problem
from opsdctl.daemon.auto_export import exporter_for
from opsdctl.daemon.notify import start_notifier
from opsdctl.daemon.salvage import recover_chain
from opsdctl.daemon.activity import ActivityBoard
from opsdctl.daemon.executors import executor_kind, make_executor, worker_gate_config
from opsdctl.daemon.gpu_probe import resolve_devices
from opsdctl.daemon.run_context import SerialGate, StopRequest, run_dir_of
from opsdctl.plan.slots import Layout, layout_of
from opsdctl.store.engine import (
    Store,
    chains_in_state,
    get_meta,
    queued_chains,
    running_stages,
    set_meta,
)
from opsdctl.store.locks import WorkerBusy, worker_lock, worker_lock_path  # noqa: F401  (re-exported)
from opsdctl.store.models import Chain, Stage, Variant, WorkerRun, utcnow
from opsdctl.store.states import State, transition

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


# --- recovery -----------------------------------------------------------------------------


@dataclass
class Recovered:
    chain_id: int
    requeued_as: Optional[int]
    stopped: int  # stage processes stopped


def recover(store: Store, cfg: Config, report: Callable[[str], None],
            remote_stop: Optional[Callable[[Stage], Optional[procs.KillReport]]] = None,
            any_host: bool = False) -> list[Recovered]:
    """Chains left `running` by a dead worker: stop their stage processes if they are still
    alive and provably ours, mark the chains interrupted, and re-queue them.

    `remote_stop` (the executor's) stops a stage that ran elsewhere (a Ray node) and returns
    None for one it does not know. `any_host`: this worker's lock is store-wide (PostgreSQL), so
    no other worker can be alive anywhere and chains claimed on other hosts are stale too."""
    out = []
    # Stage rows still `running` (their chain may already be cancelled): stop what is left.
    with store.read() as s:
        stale_stages = running_stages(s)
        stale_chains = chains_in_state(s, State.RUNNING)
    stopped_by_chain: dict[int, int] = {}
    for st in stale_stages:
        rep = remote_stop(st) if remote_stop is not None else None
        if rep is None and st.host and st.host != socket.gethostname():
            report(f"chain {st.chain_id}: its {st.name} stage ran on {st.host}; cannot stop processes there")
            continue
        if rep is None:
            ident = procs.StageIdentity(st.pgid, st.pid, st.create_time, st.token)
            rep = procs.stop_stage(ident, cfg.kill_grace_seconds)
        if rep.unverified_group:
            report(f"chain {st.chain_id}: process group {st.pgid} exists but is not provably ours; left alone")
        stopped_by_chain[st.chain_id] = stopped_by_chain.get(st.chain_id, 0) + rep.found
        with store.write() as s:
            row = s.get(Stage, st.id)
            if row.state == State.RUNNING.value:
                row.state = State.INTERRUPTED.value
                row.finished_at = utcnow()
                row.reason = "its worker died" + (f"; {rep.summary()}" if rep.found else "")
    here = socket.gethostname()
    for chain in stale_chains:
        if chain.worker_host and chain.worker_host != here and not any_host:
            report(f"chain {chain.id}: runs under a worker on {chain.worker_host}; left to that host")
            continue
        restored = recipe_file.restore_after_crash(run_dir_of(cfg, chain.id), report)
        if restored:
            report(f"chain {chain.id}: {restored} (recipe_env_path, left by the dead worker's train stage)")
        n = stopped_by_chain.get(chain.id, 0)
        where = f" during {chain.stage}" if chain.stage else ""
        pid = f" (pid {chain.worker_pid})" if chain.worker_pid else ""
        reason = f"worker{pid} died{where}" + (
            f"; stopped {n} orphaned stage process{'es' if n != 1 else ''}" if n else "; its stage processes were gone"
        )
        notes: list[str] = []
        with store.write() as s:  # finished work is salvaged, not re-run (opsdctl.daemon.salvage)
            new_id = recover_chain(s, cfg, s.get(Chain, chain.id), reason, notes.append)
        for note in notes:
            report(note)
        out.append(Recovered(chain.id, new_id, n))
    return out


# --- the worker ---------------------------------------------------------------------------


class Worker:
    def __init__(
        self,
        cfg: Config,
        store: Store,
        *,
        drain: bool = False,
        gate: Optional[Gate] = None,
        report: Callable[[str], None] = print,
        max_chains: Optional[int] = None,
    ):
        self.cfg = cfg
        self.store = store
        self.drain = drain
        self.report = report
        self.max_chains = max_chains
        self.stop = StopRequest()
        # the GPU layout, once: the planner prices chains on it, the local executor shares it out
        self.layout = (layout_of(cfg, resolve_devices(cfg.devices)) if executor_kind(cfg) != "ray"
                       else Layout())
        self.gate = gate if gate is not None else make_planner_gate(
            worker_gate_config(cfg), self.usable_seconds, store, report, self.layout)
        self.board: Optional[ActivityBoard] = None  # set at start-up, once this worker run is recorded
        self.run_id: Optional[int] = None
        self.clock_start: Optional[float] = None
        self.keeper: Optional[BudgetKeeper] = None  # set at start-up, once the hours clock is known

    def _budget_view(self):
        return self.keeper.view() if self.keeper is not None else budget_now(self.cfg.budget, self.clock_start)

    def usable_seconds(self) -> Optional[float]:
        if self.keeper is None:
            return budget_now(self.cfg.budget, self.clock_start).usable_seconds
        return self.keeper.usable_seconds()

    # signals --------------------------------------------------------------------------------

    def _on_signal(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        first = not self.stop
        self.stop.set(name)
        if first:
            self.report(f"{name}: stopping the running stage(s) (again to skip the {self.cfg.kill_grace_seconds:g}s grace)")
        else:
            self.report(f"{name} again: killing now")

    @contextmanager
    def _signals(self):
        old = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _signals_again(self) -> None:
        """Take SIGINT/SIGTERM back after starting Ray: ray.init installs its C++ failure-signal
        handler over ours, which logged a SIGTERM and then aborted the worker (no re-queue's last
        word, no exit hooks: Ray's private temp dir was left behind). signal.getsignal cannot
        tell (it reads Python's table, not the process's), so they are always set again."""
        for s in STOP_SIGNALS:
            signal.signal(s, self._on_signal)

    # life -----------------------------------------------------------------------------------

    def run(self) -> int:
        """Run until drained (with --drain) or stopped. Returns the number of chains run."""
        with worker_lock(self.cfg, self.store) as lock, self._signals():
            self._register()
            disk_reserve.keep(disk_reserve.reserve_path(self.store.sqlite_path))  # room to re-queue on a full disk
            ran = 0
            exit_reason = "stopped"
            try:
                gate = SerialGate(self.gate)  # the loop and every chain's thread ask it one at a time
                executor = make_executor(self.cfg, self.store, gate, self.stop, self.report, self.run_id,
                                         self.usable_seconds, board=self.board, layout=self.layout)
                self._signals_again()
                exporter = None
                notifier = start_notifier(self.cfg, self.store, self.report, self._budget_view)  # [notify]
                try:
                    recover(self.store, self.cfg, self.report, remote_stop=executor.stop_remote_stage,
                            any_host=lock.store_wide)
                    exporter = exporter_for(self.cfg, self.store, self.report, self._budget_view)  # [export], the bet
                    ran = self._loop(executor, gate)
                finally:
                    executor.close()  # on a stop or an error: stop what still runs elsewhere
                    if exporter is not None:
                        exporter.stop()
                    notifier.stop()  # last: delivers the interrupted / exported events of the stop itself
                exit_reason = f"stopped by {self.stop.reason}" if self.stop else "drained" if self.drain else "stopped"
            except BaseException as exc:
                exit_reason = f"crashed: {type(exc).__name__}: {exc}"
                problem = None if isinstance(exc, UserError) else environment_problem(exc)
                if problem is not None:  # the machine's fault: one line, not a traceback
                    exit_reason = f"stopped: {problem}"
                    raise EnvironmentProblem(f"worker stopped: {problem}; free the space or fix the "
                                             "permissions, then start the worker again") from None
                if isinstance(exc, UserError):
                    exit_reason = f"stopped: {exc}"
                raise
            finally:
                self._unregister(exit_reason)
            return ran

    def _register(self) -> None:
        with self.store.write() as s:
            row = WorkerRun(pid=os.getpid(), host=socket.gethostname(), create_time=procs.create_time_of(os.getpid()),
                            drain=self.drain, activity="starting")
            s.add(row)
            s.flush()
            self.run_id = row.id
            forget_deadline(s)
            if self.cfg.budget.kind == "hours":
                start = get_meta(s, CLOCK_KEY)
                if start is None:
                    start = repr(time.time())
                    set_meta(s, CLOCK_KEY, start)
                self.clock_start = float(start)
        self.board = ActivityBoard(self.store, self.run_id)
        self.keeper = BudgetKeeper(self.cfg.budget, self.clock_start, self.store, report=self.report)
        budget = self.keeper.view()
        self.report(f"worker {os.getpid()} on {self.store.safe_url()}; budget: {budget.text()}")

    def _unregister(self, reason: str) -> None:
        try:
            with self.store.write() as s:
                row = s.get(WorkerRun, self.run_id)
                row.stopped_at = utcnow()
                row.exit_reason = reason
                row.activity = ""
        except Exception:  # the store may be the reason we are exiting
            pass

    def _loop(self, executor, gate) -> int:
        """The one worker loop (opsdctl.plan.loop) over the store's queue and this executor."""
        hold = (lambda: hold_reason(self.keeper.view())) if self.keeper is not None else (lambda: None)
        loop = WorkerLoop(
            gate, StoreQueue(self.store), executor, WallClock(lambda: bool(self.stop)),
            options=LoopOptions(drain=self.drain, max_chains=self.max_chains, poll_s=self.cfg.poll_seconds),
            report=self.report, activity=self.board.loop, stopped=lambda: bool(self.stop), hold=hold,
        )
        return loop.run()


class StoreQueue:
    """The worker loop's queue: the store's queued chains, and its two guarded transitions."""

    def __init__(self, store: Store):
        self.store = store

    def queued(self) -> list[ChainInfo]:
        with self.store.read() as s:
            queued = queued_chains(s)
            variants = {v.id: v for v in (s.get(Variant, c.variant_id) for c in queued)}
        return [chain_info(c, variants[c.variant_id]) for c in queued]

    def skip(self, chain_id: int, reason: str) -> bool:
        with self.store.write() as s:
            return transition(s, chain_id, State.QUEUED, State.SKIPPED, reason=reason)

    def claim(self, chain_id: int) -> bool:
        with self.store.write() as s:
            return transition(s, chain_id, State.QUEUED, State.RUNNING, started_at=utcnow(), worker_pid=os.getpid(),
                              worker_host=socket.gethostname(), stage=None)


def run_worker(cfg: Config, store: Store, drain: bool = False, report: Callable[[str], None] = print) -> int:
    return Worker(cfg, store, drain=drain, report=report).run()
