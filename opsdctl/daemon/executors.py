"""The worker's executors: how claimed chains are run, here or on a Ray cluster.

Both sit behind the worker loop's one Executor seam (opsdctl.plan.loop.Executor: has_room,
start, poll, busy, close, stop_remote_stage). `executor = "local"` (the default):
opsdctl.daemon.local.LocalExecutor, each chain in a thread of its own on this machine, as many at
once as the GPU layout holds (gpus_per_chain; unset: one at a time). `executor = "ray"`:
opsdctl.daemon.ray_cluster, one chain per free node slot of a Ray cluster, each run on its node
by the same ChainRun code. Ray is imported only there, only when configured.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from opsdctl.daemon.activity import ActivityBoard
from opsdctl.daemon.local import LocalExecutor, make_context
from opsdctl.daemon.run_context import StopRequest


def executor_kind(cfg) -> str:
    return cfg.section("").get("executor") or "local"


def make_executor(cfg, store, gate, stop: StopRequest, report: Callable[[str], None],
                  worker_run_id: Optional[int] = None, budget_left: Optional[Callable[[], Optional[float]]] = None,
                  *, board: Optional[ActivityBoard] = None, layout=None):
    """The executor the config asks for. `gate` is the worker's (behind run_context.SerialGate:
    the loop and the chains' threads share it); the Ray executor builds each node's own gate
    there (GPU checks and per-stage budget checks run where the GPUs are)."""
    if executor_kind(cfg) == "ray":
        from opsdctl.daemon.ray_cluster import RayExecutor

        return RayExecutor(cfg, store, stop, report, worker_run_id, budget_left)
    board = board if board is not None else ActivityBoard(store, worker_run_id)
    return LocalExecutor(make_context(cfg, store, gate, stop, report, board, layout))


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
    from opsdctl.daemon.ray_cluster import ActorStageStopper

    stopper = ActorStageStopper(cfg, store, grace)
    stopper.prepare(chain_ids)
    return stopper
