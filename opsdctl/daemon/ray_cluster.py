"""The `ray` executor: chains run on a Ray cluster, one chain per free node slot.

What runs where
- The worker (`opsdctl worker`, a Ray driver, on the head node or any machine that reaches the
  cluster and the store) keeps the queue: its gate orders and admits chains, it claims them
  (`queued -> running`), and for each one reserves a node slot: a placement group of one bundle
  {CPU: 1, GPU: gpus_per_chain} with STRICT_PACK, so all of a chain's GPUs are on one node. It
  only claims a chain once such a slot is ready, so queued chains stay queued (and admission
  stays honest) while the cluster is full. The slot's node is recorded as chain.node_id.
- A ChainRunner actor in that slot (named `opsdctl-chain-<id>` in the store's namespace) runs
  the chain on its node with the local executor's own code (opsdctl.daemon.chain_run): the same
  stage contract, spawn, environment, watch loop and result ingestion. Its [gpus] devices are
  the GPUs Ray assigned to it, and its gate is built there (make_planner_gate): the per-stage
  budget checks and the NVML gate of its GPUs (opsdctl.daemon.gpu_gate) run on the node that has
  the GPUs. It opens the store itself and
  writes every state, stage row, progress record, score and training statistic directly, so the
  store must be reachable from every node: PostgreSQL for a cluster (SQLite only when the whole
  "cluster" is one machine, as in the tests).
- Cancel: `opsdctl cancel` moves the chain to `cancelled` in the store, then calls the actor that
  owns the stage (ActorStageStopper -> ChainRunner.stop_stage), which stops only its own,
  verified stage processes (procs.stop_stage). The actor's watch loop sees the state change
  within a second too, and records the stage's end.

Failure rule: a chain is never `running` forever.
- Its actor dies (worker process killed, node lost: Ray's actor-death detection raises
  ActorDiedError on the run call; a lost node takes Ray's health check, ~30 s by default): the
  worker stops what is left of the stage on that node through a small task pinned to
  chain.node_id (verified process group only; a node that is gone has nothing left to stop),
  marks the stage and the chain `interrupted` with the reason, and re-queues a fresh chain.
- The worker (driver) dies: its actors die with it (they are owned by the driver); stage
  processes run in their own sessions and may survive. The next worker start recovers as with
  the local executor: stale `running` chains are interrupted and re-queued, their stage
  processes stopped through a task pinned to chain.node_id (stop_remote_stage).
- The worker is stopped (SIGINT/SIGTERM): it asks every actor to stop its stage; those chains end
  `interrupted` and are re-queued (finished work salvaged), as locally and as after a SIGKILL.
- An actor that fails on the node (an error in run_chain) leaves its chain `interrupted`, not
  re-queued; one that cannot even be created there (opsdctl missing on the node) fails it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.placement_group import (
    placement_group,
    placement_group_table,
    remove_placement_group,
)
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from opsdctl.errors import UserError
from opsdctl.plan.budget import CLOCK_KEY, budget_now
from opsdctl.daemon import procs
from opsdctl.store.chain_copy import interrupt_and_requeue
from opsdctl.daemon.local import make_context, run_chain_here
from opsdctl.daemon.run_context import StopRequest
from opsdctl.daemon.ray_local import local_init_kwargs
from opsdctl.store.engine import Store, any_queued, get_meta, open_store, stages_of
from opsdctl.store.models import Chain, Stage, WorkerRun, utcnow
from opsdctl.store.states import State, transition

ACTOR_PREFIX = "opsdctl-chain-"
SLOT_CPUS = 1  # the ChainRunner's own share of the node; stage processes are not Ray's to count
ACTOR_CONCURRENCY = 4  # run() holds one thread; stop_stage/interrupt/where answer on the others
NODE_TASK_TIMEOUT_S = 30.0  # beyond the kill grace, for a task pinned to a chain's node
CLOSE_WAIT_S = 30.0  # beyond the kill grace, for actors to record their interrupted stages
SLOT_NOTE_S = 60.0  # say so when no node slot has freed up for this long
HEARTBEAT_S = 10.0


# --- shared helpers -----------------------------------------------------------------------


def namespace_for(store: Store) -> str:
    """The Ray namespace of a store: actors of two stores on one cluster never meet."""
    return "opsdctl-" + hashlib.sha256(store.safe_url().encode()).hexdigest()[:12]


def ray_address(cfg) -> Optional[str]:
    return cfg.section("").get("ray_address")


def gpus_per_chain(cfg) -> int:
    """`gpus_per_chain`, else the configured devices count (so a 4-GPU config asks for 4)."""
    n = cfg.section("").get("gpus_per_chain")
    if n is not None:
        return int(n)
    if cfg.devices == "all":
        raise UserError(
            f'{cfg.where}: [gpus] devices = "all" with executor = "ray": set gpus_per_chain '
            "(how many GPUs each chain asks Ray for on one node)"
        )
    return len(cfg.devices)


def connect(cfg, namespace: str, quiet: bool = False) -> None:
    """Join the configured cluster (ray_address), or start a local Ray when it is unset.
    A process that already joined one (tests) keeps it."""
    if ray.is_initialized():
        return
    address = ray_address(cfg)
    kwargs = dict(namespace=namespace, log_to_driver=not quiet, logging_level="ERROR" if quiet else "WARNING")
    if address is None:
        kwargs.update(local_init_kwargs())  # loopback only
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:
        where = f"ray_address = {address!r}" if address else "a local Ray instance (ray_address unset)"
        raise UserError(f"{cfg.where}: {where}: cannot start or join Ray: {_first_line(exc)}") from None


def node_config(cfg, gpus: list):
    """The config as a node sees it: its [gpus] devices are the GPUs Ray assigned to the actor."""
    sections = dict(cfg.sections)
    sections["gpus"] = {**sections.get("gpus", {}), "devices": list(gpus)}
    return dataclasses.replace(cfg, devices=list(gpus), sections=sections)


def node_gate(cfg, budget_left, store, report):
    """The node's gate: the planner, as the worker's, over the node's GPUs."""
    from opsdctl.plan.planner import make_planner_gate

    return make_planner_gate(cfg, budget_left, store, report)


def _assigned_gpus() -> list:
    out = []
    for g in ray.get_gpu_ids():
        try:
            out.append(int(g))
        except (TypeError, ValueError):
            out.append(g)
    return out


def _first_line(exc: BaseException, last: bool = False) -> str:
    import re

    lines = [l.strip() for l in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if l.strip()]
    if not lines:
        return type(exc).__name__
    return (lines[-1] if last else lines[0])[:300]


@dataclass
class RemoteKillReport(procs.KillReport):
    via: str = ""  # where and how the processes were stopped, for messages


def _stop_stage_here(ident: tuple, grace: float) -> dict:
    """A task pinned to a chain's node: stop the stage's verified processes there."""
    rep = procs.stop_stage(procs.StageIdentity(*ident), grace)
    return {"found": rep.found, "signalled": rep.signalled, "survivors": rep.survivors,
            "unverified_group": rep.unverified_group, "host": socket.gethostname()}


def stop_on_node(node_id: str, st: Stage, grace: float) -> RemoteKillReport:
    """Stop stage `st`'s processes on Ray node `node_id` (a task pinned there, verified group only)."""
    task = ray.remote(_stop_stage_here).options(
        num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    )
    ref = task.remote((st.pgid, st.pid, st.create_time, st.token), grace)
    try:
        d = ray.get(ref, timeout=grace + NODE_TASK_TIMEOUT_S)
    except (GetTimeoutError, RayError) as exc:
        try:
            ray.cancel(ref, force=True)
        except Exception:
            pass
        return RemoteKillReport(via=f"node {node_id[:12]} did not answer ({_first_line(exc)}); "
                                    "nothing there could be checked")
    host = d.pop("host")
    return RemoteKillReport(**d, via=f"on {host} (node {node_id[:12]})")


# --- the actor: one chain on its node -------------------------------------------------------


class ChainRunner:
    """Runs one chain on the node Ray placed it on (a threaded actor: run() keeps one thread,
    stop_stage / interrupt / where answer on the others)."""

    def __init__(self, cfg, chain_id: int, budget_at_start: Optional[float] = None,
                 gate_factory: Optional[Callable] = None):
        self.cfg = cfg
        self.chain_id = chain_id
        self.budget_at_start = budget_at_start
        self.t0 = time.monotonic()
        self.gate_factory = gate_factory or node_gate
        self.stop = StopRequest()
        self.host = socket.gethostname()
        self.store: Optional[Store] = None
        self.clock_start: Optional[float] = None

    def where(self) -> dict:
        return {"host": self.host, "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "gpus": _assigned_gpus()}

    def run(self) -> str:
        cfg = node_config(self.cfg, _assigned_gpus())
        # Ray narrowed this process's CUDA_VISIBLE_DEVICES to the GPUs it assigned. The node's
        # gate and the stages name those GPUs by the node's own indices (Ray's ids, now [gpus]
        # devices), so the actor must not look like a process that inherited a narrowed view.
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        store = self._store()
        if cfg.budget.kind == "hours":
            with store.read() as s:
                start = get_meta(s, CLOCK_KEY)
            self.clock_start = float(start) if start else None
        gate = self.gate_factory(cfg, self._budget_left, store, self._report)
        ctx = make_context(cfg, store, gate, self.stop, self._report)
        return run_chain_here(ctx, self.chain_id).value

    def interrupt(self, reason: str, force: bool = False) -> None:
        self.stop.set(reason)
        if force:
            self.stop.force = True

    def stop_stage(self, grace: float, stage_id: Optional[int] = None) -> dict:
        """Stop this chain's running stage on this node (cancel): its verified processes only."""
        with self._store().read() as s:
            rows = [st for st in stages_of(s, self.chain_id)
                    if st.state == State.RUNNING.value and st.host == self.host
                    and (stage_id is None or st.id == stage_id)]
        found, survivors, unverified = 0, [], False
        for st in rows:
            rep = procs.stop_stage(procs.StageIdentity(st.pgid, st.pid, st.create_time, st.token), grace)
            found += rep.found
            survivors += rep.survivors
            unverified = unverified or rep.unverified_group
        return {"found": found, "survivors": survivors, "unverified_group": unverified, "host": self.host}

    def _store(self) -> Store:
        if self.store is None:
            self.store = open_store(self.cfg.db)
        return self.store

    def _budget_left(self) -> Optional[float]:
        view = budget_now(self.cfg.budget, self.clock_start)
        if view.error is None or self.budget_at_start is None:
            return view.usable_seconds
        # The worker's countdown file is not on this node: count down from the worker's reading.
        return self.budget_at_start - (time.monotonic() - self.t0)

    def _report(self, msg: str) -> None:
        print(f"[{self.host}] {msg}", flush=True)


# --- the worker's side ----------------------------------------------------------------------


@dataclass
class _Flight:
    chain_id: int
    actor: object
    ref: object
    pg: object
    node_id: str
    started: float = field(default_factory=time.monotonic)


class RayExecutor:
    def __init__(self, cfg, store: Store, stop: StopRequest, report: Callable[[str], None],
                 worker_run_id: Optional[int] = None, budget_left: Optional[Callable[[], Optional[float]]] = None,
                 gate_factory: Optional[Callable] = None):
        self.cfg = cfg
        self.store = store
        self.stop_request = stop
        self.report = report
        self.worker_run_id = worker_run_id
        self.budget_left = budget_left
        self.gate_factory = gate_factory
        self.namespace = namespace_for(store)
        self.gpus = gpus_per_chain(cfg)
        connect(cfg, self.namespace)
        self._actor_class = ray.remote(ChainRunner)
        gpus = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''} on one node" if self.gpus else "no GPUs"
        report(f"executor ray: {ray_address(cfg) or 'a local Ray instance'} ({_resources()}); "
               f"each chain gets {gpus}")
        self._slot = None  # a placement group reserved for the next chain
        self._slot_since = 0.0
        self._slot_noted = False
        self.flights: dict[int, _Flight] = {}
        self._ended: list[tuple[int, State]] = []
        self._last_beat = 0.0

    # the seam -----------------------------------------------------------------------------

    def has_room(self) -> bool:
        """A node slot is reserved and ready. Slots are reserved only while chains are queued
        (an idle worker holds no GPUs of the cluster)."""
        if self.stop_request:
            return False
        if not self._queued():
            if self._slot is not None:
                _remove(self._slot)
                self._slot = None
            return False
        if self._slot is None:
            bundle = {"CPU": SLOT_CPUS, **({"GPU": self.gpus} if self.gpus else {})}
            self._slot = placement_group([bundle], strategy="STRICT_PACK")
            self._slot_since = time.monotonic()
            self._slot_noted = False
        if self._slot.wait(0):
            return True
        if not self._slot_noted and time.monotonic() - self._slot_since > SLOT_NOTE_S:
            self._slot_noted = True
            self.report(f"waiting for a node with {self.gpus} GPU(s) and {SLOT_CPUS} CPU free "
                        f"({len(self.flights)} chain(s) running; cluster: {_resources()})")
        return False

    def busy(self) -> int:
        return len(self.flights)

    def _queued(self) -> bool:
        with self.store.read() as s:
            return any_queued(s)

    def start(self, chain_id: int, gpus: Optional[int] = None) -> None:  # a node slot's GPUs are gpus_per_chain
        pg, self._slot = self._slot, None
        try:
            node_id = placement_group_table(pg)["bundles_to_node_id"][0]
            with self.store.write() as s:
                s.get(Chain, chain_id).node_id = node_id
            budget = self.budget_left() if self.budget_left else None
            actor = self._actor_class.options(
                name=f"{ACTOR_PREFIX}{chain_id}", namespace=self.namespace, num_cpus=SLOT_CPUS, num_gpus=self.gpus,
                max_concurrency=ACTOR_CONCURRENCY, max_restarts=0, max_task_retries=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0),
            ).remote(self.cfg, chain_id, budget, self.gate_factory)
            ref = actor.run.remote()
        except Exception as exc:
            _remove(pg)
            reason = f"could not start on Ray: {self.store.redact(_first_line(exc))}"
            with self.store.write() as s:
                transition(s, chain_id, State.RUNNING, State.FAILED, reason=reason)
            self.report(f"chain {chain_id}: failed: {reason}")
            self._ended.append((chain_id, self._state(chain_id)))
            return
        self.flights[chain_id] = _Flight(chain_id, actor, ref, pg, node_id)
        self.report(f"chain {chain_id}: started on Ray node {node_id[:12]}"
                    + (f" with {self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else ""))

    def poll(self) -> list[tuple[int, State]]:
        out, self._ended = self._ended, []
        if self.flights:
            by_ref = {f.ref: cid for cid, f in self.flights.items()}
            ready, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
            for ref in ready:
                cid = by_ref[ref]
                out.append((cid, self._finish(self.flights.pop(cid))))
        self._heartbeat()
        return out

    def stop_remote_stage(self, st: Stage) -> Optional[procs.KillReport]:
        """Recovery: stop a dead worker's stage on the node its chain ran on (None: not a Ray chain)."""
        with self.store.read() as s:
            chain = s.get(Chain, st.chain_id)
            node_id = chain.node_id if chain is not None else None
        if not node_id:
            return None
        return stop_on_node(node_id, st, self.cfg.kill_grace_seconds)

    def close(self) -> None:
        if self._slot is not None:
            _remove(self._slot)
            self._slot = None
        if not self.flights:
            return
        reason = self.stop_request.reason or "the worker is exiting"
        forced = self.stop_request.force
        for f in self.flights.values():
            _quietly(lambda f=f: f.actor.interrupt.remote(reason, forced))
        grace = 0.0 if forced else self.cfg.kill_grace_seconds
        deadline = time.monotonic() + grace + CLOSE_WAIT_S
        while self.flights and time.monotonic() < deadline:
            if self.stop_request.force and not forced:  # a second signal while we wait
                forced = True
                for f in self.flights.values():
                    _quietly(lambda f=f: f.actor.interrupt.remote(reason, True))
            self.poll()
            time.sleep(0.2)
        for cid, f in list(self.flights.items()):  # did not stop in time: end it from here
            self.flights.pop(cid)
            _quietly(lambda f=f: ray.kill(f.actor, no_restart=True))
            self._interrupt(f, f"worker stopped ({reason}); its Ray actor did not stop in time", requeue=True)
            _remove(f.pg)

    # endings ------------------------------------------------------------------------------

    def _finish(self, f: _Flight) -> State:
        try:
            return State(ray.get(f.ref))
        except RayActorError as exc:  # the actor's process or node is gone
            if getattr(exc, "actor_init_failed", False):  # it never started: a broken node set-up
                return self._failed_start(f, exc)
            return self._interrupt(f, f"its Ray actor died ({_first_line(exc)})", requeue=True)
        except RayError as exc:  # run_chain raised on the node (a bug, or the store unreachable there)
            why = self.store.redact(_first_line(getattr(exc, "cause", None) or exc))
            self.report(f"chain {f.chain_id}: error on its node: {why}")
            if self._state(f.chain_id) == State.RUNNING:
                return self._interrupt(f, f"error on its Ray node: {why}", requeue=False)
            return self._state(f.chain_id)
        finally:
            _quietly(lambda: ray.kill(f.actor, no_restart=True))
            _remove(f.pg)

    def _failed_start(self, f: _Flight, exc: BaseException) -> State:
        """The actor raised while being created on the node (e.g. opsdctl missing there): the
        chain fails, not re-queued, or every retry would land on the same broken set-up."""
        reason = f"its Ray actor could not start on node {f.node_id[:12]}: {self.store.redact(_first_line(exc, last=True))}"
        with self.store.write() as s:
            transition(s, f.chain_id, State.RUNNING, State.FAILED, reason=reason)
        self.report(f"chain {f.chain_id}: failed: {reason}")
        return self._state(f.chain_id)

    def _interrupt(self, f: _Flight, why: str, requeue: bool) -> State:
        """The chain's actor is gone: stop what is left of its stage on its node, record the
        stage and the chain `interrupted`, and (requeue) queue a fresh copy."""
        with self.store.read() as s:
            chain = s.get(Chain, f.chain_id)
            live = [st for st in stages_of(s, f.chain_id) if st.state == State.RUNNING.value]
        where = f" during {chain.stage}" if chain.stage else ""
        stopped = []
        for st in live:
            rep = stop_on_node(f.node_id, st, self.cfg.kill_grace_seconds)
            note = f"{rep.summary()} {rep.via}" if rep.found else rep.via if "did not answer" in rep.via else ""
            if note:
                stopped.append(note)
            with self.store.write() as s:
                row = s.get(Stage, st.id)
                if row.state == State.RUNNING.value:
                    row.state = State.INTERRUPTED.value
                    row.finished_at = utcnow()
                    row.reason = why + (f"; {note}" if note else "")
        reason = f"{why}{where}" + (f"; {'; '.join(stopped)}" if stopped else "")
        with self.store.write() as s:
            fresh = interrupt_and_requeue(s, s.get(Chain, f.chain_id), reason[:1000], requeue=requeue)
        state = self._state(f.chain_id)
        if state == State.INTERRUPTED:
            tail = f"; re-queued as chain {fresh.id}" if fresh is not None else ""
            self.report(f"chain {f.chain_id}: interrupted ({reason}){tail}")
        return state

    def _state(self, chain_id: int) -> State:
        with self.store.read() as s:
            return State(s.get(Chain, chain_id).state)

    def _heartbeat(self) -> None:
        if self.worker_run_id is None or time.monotonic() - self._last_beat < HEARTBEAT_S:
            return
        self._last_beat = time.monotonic()
        text = ", ".join(f"chain {cid} (node {f.node_id[:8]})" for cid, f in sorted(self.flights.items()))
        with self.store.write() as s:
            row = s.get(WorkerRun, self.worker_run_id)
            row.heartbeat_at = utcnow()
            if self.flights:
                row.activity = f"on Ray: {text}"


def _remove(pg) -> None:
    _quietly(lambda: remove_placement_group(pg))


def _quietly(fn) -> None:
    try:
        fn()
    except Exception:
        pass


def _resources() -> str:
    try:
        res = ray.cluster_resources()
        return ", ".join(f"{k} {v:g}" for k, v in sorted(res.items()) if k in ("CPU", "GPU"))
    except Exception:
        return "unknown"


# --- `opsdctl cancel` -------------------------------------------------------------------------


class ActorStageStopper:
    """Stop a running stage through the Ray actor that owns it (it verifies and signals only its
    own process group); when that actor is gone, through a task pinned to the chain's node.
    Returns None for a chain that did not run on Ray (cancel then signals it itself)."""

    def __init__(self, cfg, store: Store, grace: float):
        self.cfg = cfg
        self.store = store
        self.grace = grace
        self._done: set[int] = set()
        self._unreachable: Optional[str] = None
        self._actors: dict[int, object] = {}

    def prepare(self, chain_ids) -> None:
        """Join Ray and reach the actors of those of `chain_ids` that run there, now, before the
        state changes: connecting takes seconds, and the stop should follow the cancel at once."""
        with self.store.read() as s:
            on_ray = [c.id for c in (s.get(Chain, int(i)) for i in chain_ids)
                      if c is not None and c.state == State.RUNNING.value and c.node_id]
        if not on_ray or not self._connect():
            return
        for cid in on_ray:
            try:
                actor = ray.get_actor(f"{ACTOR_PREFIX}{cid}", namespace=namespace_for(self.store))
                ray.get(actor.where.remote(), timeout=NODE_TASK_TIMEOUT_S)
            except Exception:
                continue  # gone already: __call__ falls back to the node
            self._actors[cid] = actor

    def _connect(self) -> bool:
        if self._unreachable is None and not ray.is_initialized():
            try:
                connect(self.cfg, namespace_for(self.store), quiet=True)
            except UserError as exc:
                self._unreachable = str(exc)
        return self._unreachable is None

    def __call__(self, st: Stage) -> Optional[procs.KillReport]:
        if st.id in self._done:
            return RemoteKillReport()
        with self.store.read() as s:
            node_id = s.get(Chain, st.chain_id).node_id
        if not node_id:
            return None
        namespace = namespace_for(self.store)
        if not self._connect():
            self._done.add(st.id)
            return RemoteKillReport(via=f"Ray unreachable ({self._unreachable}); "
                                        "its actor stops the stage when it sees the cancel")
        try:
            actor = self._actors.get(st.chain_id) or ray.get_actor(f"{ACTOR_PREFIX}{st.chain_id}", namespace=namespace)
        except ValueError:
            rep = stop_on_node(node_id, st, self.grace)
            rep.via += " (its Ray actor was gone)"
        else:
            try:
                d = ray.get(actor.stop_stage.remote(self.grace, st.id), timeout=self.grace + NODE_TASK_TIMEOUT_S)
            except (GetTimeoutError, RayError) as exc:
                rep = stop_on_node(node_id, st, self.grace)
                rep.via += f" (its Ray actor did not answer: {_first_line(exc)})"
            else:
                host = d.pop("host")
                rep = RemoteKillReport(**d, via=f"through its Ray actor on {host}")
        self._done.add(st.id)
        return rep
