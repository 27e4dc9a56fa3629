"""What every chain running on this machine shares: the config, the store, the gate, the stop
signal, the log, the activity board, the GPU pool and gate, and the lineage of the worker's
children. One per executor; each running chain (opsdctl.daemon.chain_run.ChainRun) holds it.

The gate is the planner, which is not thread-safe: `SerialGate` lets one chain's thread ask it
at a time (its answers are quick: the GPU waits are the daemon's own, outside the gate).
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from opsdctl.config import Config
from opsdctl.daemon.activity import ActivityBoard
from opsdctl.daemon.gpu_gate import GpuGate
from opsdctl.daemon.gpu_pool import GpuPool
from opsdctl.daemon.lineages import Lineages
from opsdctl.plan.slots import Layout
from opsdctl.store.engine import Store


class StopRequest:
    """Set by the worker's signal handler (or its exit); read by every running stage's watch."""

    def __init__(self):
        self.reason: Optional[str] = None
        self.force = False

    def set(self, reason: str) -> None:
        if self.reason is not None:
            self.force = True  # a second signal: do not wait for the grace period
        else:
            self.reason = reason

    def __bool__(self) -> bool:
        return self.reason is not None


class SerialGate:
    """The gate behind a lock: the worker loop and every chain's thread ask it one at a time."""

    def __init__(self, gate):
        self.inner = gate
        self._lock = threading.RLock()

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            with self._lock:
                return attr(*args, **kwargs)

        return call


@dataclass
class RunContext:
    cfg: Config
    store: Store
    gate: object  # a Gate, behind SerialGate when chains run at once
    stop: StopRequest
    report: Callable[[str], None]
    board: ActivityBoard
    layout: Layout
    pool: Optional[GpuPool]  # None: no GPUs to share out; the gate's Grant names them
    gpus: GpuGate
    lineages: Lineages = field(default_factory=Lineages)
    host: str = field(default_factory=socket.gethostname)

    def grace(self) -> float:
        return 0.0 if self.stop.force else self.cfg.kill_grace_seconds

    def forced(self) -> bool:
        """Re-read while a stage's grace period runs: a second signal kills now."""
        return self.stop.force


def run_dir_of(cfg: Config, chain_id: int) -> Path:
    return cfg.runs_dir / str(chain_id)
