"""The worker's executor seam: how claimed chains are run, here or on a Ray cluster.

The worker loop (opsdctl/run/worker.py) drives an Executor:

  has_room() -> bool              may another chain start now?
  start(chain_id)                 run a claimed (`running`) chain
  poll() -> [(chain_id, State)]   chains that ended since the last poll
  busy() -> int                   chains started and not ended yet
  stop_remote_stage               None, or stage row -> KillReport | None: recovery's way to stop
                                  a dead worker's stage processes on another machine
  close()                         the worker leaves: stop what still runs, give resources back

`executor = "local"` (the default): SerialExecutor, one chain at a time on this machine;
start() runs the chain to its end with LocalExecutor.run_chain before it returns, so the loop
behaves exactly as a plain `run_chain` loop. `executor = "ray"`: opsdctl.run.ray_cluster,
one chain per free node slot of a Ray cluster, each run on its node by the same LocalExecutor
code. Ray is imported only there, only when configured.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from opsdctl.run.local import LocalExecutor, StopRequest
from opsdctl.store.states import State


def executor_kind(cfg) -> str:
    return cfg.section("").get("executor") or "local"


class SerialExecutor:
    """The local executor behind the seam: one chain at a time, run to its end in start()."""

    stop_remote_stage = None

    def __init__(self, local: LocalExecutor):
        self.local = local
        self._ended: list[tuple[int, State]] = []

    def has_room(self) -> bool:
        return True

    def busy(self) -> int:
        return 0

    def start(self, chain_id: int) -> None:
        self._ended.append((chain_id, self.local.run_chain(chain_id)))

    def poll(self) -> list[tuple[int, State]]:
        out, self._ended = self._ended, []
        return out

    def close(self) -> None:
        pass


def make_executor(cfg, store, gate, stop: StopRequest, report: Callable[[str], None],
                  worker_run_id: Optional[int] = None, budget_left: Optional[Callable[[], Optional[float]]] = None):
    """The executor the config asks for. `gate` is the worker's; the Ray executor builds each
    node's own gate there (GPU checks and per-stage budget checks run where the GPUs are)."""
    if executor_kind(cfg) == "ray":
        from opsdctl.run.ray_cluster import RayExecutor

        return RayExecutor(cfg, store, stop, report, worker_run_id, budget_left)
    return SerialExecutor(LocalExecutor(cfg, store, gate, stop, report, worker_run_id))


def worker_gate_config(cfg):
    """The config the worker's own gate is built from. With Ray the worker only orders and
    admits chains (the budget is one clock for the whole cluster); GPUs are checked and granted
    on each node, so the worker's machine (maybe a head node without GPUs) is not probed."""
    if executor_kind(cfg) != "ray":
        return cfg
    sections = dict(cfg.sections)
    sections["gpus"] = {**sections.get("gpus", {}), "devices": []}
    return dataclasses.replace(cfg, devices=[], sections=sections)


def cancel_stopper(cfg, store, grace: float, chain_ids=()):
    """For `opsdctl cancel`: a stage row -> KillReport | None that stops a stage through the
    Ray actor that owns it (None with the local executor: cancel signals the group itself).
    When one of `chain_ids` runs on Ray, it joins the cluster now, before the state changes,
    so the actor's stop follows the cancel at once."""
    if executor_kind(cfg) != "ray":
        return None
    from opsdctl.run.ray_cluster import ActorStageStopper

    stopper = ActorStageStopper(cfg, store, grace)
    stopper.prepare(chain_ids)
    return stopper
