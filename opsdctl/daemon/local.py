"""The `local` executor: chains run on this machine, up to the layout's count at once.

Behind the worker loop's Executor seam (opsdctl.plan.loop): `start(chain_id)` runs the claimed
chain in a thread of its own (opsdctl.daemon.chain_run.ChainRun: its stages, its GPUs, its
processes) and returns at once; `poll()` hands back the chains that ended; `has_room()` is true
while fewer chains run than the GPU layout holds (opsdctl.plan.slots: devices / the smallest
stage's GPUs; one chain at a time when gpus_per_chain is unset). An error of the worker itself
in a chain's thread (a bug, the store, a full disk) is raised by the next `poll()` in the
worker's own thread, as when that chain ran there. `close()` (the worker leaves) stops every
chain still running: each stops its stage and is re-queued, as on SIGTERM.

`run_chain_here` runs one chain in the caller's thread: a Ray node's actor
(opsdctl.daemon.ray_cluster) runs its chain with it, over the GPUs Ray gave it.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

from opsdctl.config import Config
from opsdctl.daemon import subreaper
from opsdctl.daemon.activity import ActivityBoard
from opsdctl.daemon.chain_run import ChainRun
from opsdctl.daemon.gpu_gate import make_gpu_gate
from opsdctl.daemon.gpu_pool import GpuPool
from opsdctl.daemon.gpu_probe import resolve_devices
from opsdctl.daemon.run_context import RunContext, StopRequest, run_dir_of  # noqa: F401  (re-exported)
from opsdctl.plan.slots import Layout, layout_of
from opsdctl.store.engine import Store
from opsdctl.store.states import State

JOIN_POLL_S = 0.2  # close(): how often the worker looks up from waiting for its chains (signals)


def make_context(cfg: Config, store: Store, gate, stop: StopRequest, report: Callable[[str], None],
                 board: Optional[ActivityBoard] = None, layout: Optional[Layout] = None) -> RunContext:
    """What the chains run here share: the layout over the resolved devices, its pool, the NVML gate."""
    if layout is None:
        layout = layout_of(cfg, resolve_devices(cfg.devices))
    return RunContext(
        cfg=cfg, store=store, gate=gate, stop=stop, report=report,
        board=board if board is not None else ActivityBoard(store, None),
        layout=layout, pool=GpuPool(layout) if layout.devices else None,
        gpus=make_gpu_gate(cfg, layout.devices, report),
    )


def run_chain_here(ctx: RunContext, chain_id: int) -> State:
    """One claimed chain to its end, in this thread."""
    subreaper.become()  # a stage's orphans become ours to stop (subreaper.py)
    return ChainRun(ctx, chain_id).run()


class LocalExecutor:
    stop_remote_stage = None  # every stage runs here: recovery stops it itself

    def __init__(self, ctx: RunContext):
        subreaper.become()  # a stage's orphans become ours to stop (subreaper.py)
        self.ctx = ctx
        self._lock = threading.Lock()
        self._running: dict[int, threading.Thread] = {}
        self._ended: list[tuple[int, State]] = []
        self._errors: list[BaseException] = []
        if not ctx.layout.serial:
            ctx.report(f"executor local: {ctx.layout.describe()}")

    def has_room(self) -> bool:
        with self._lock:
            return not self._errors and len(self._running) < self.ctx.layout.max_chains

    def busy(self) -> int:
        with self._lock:
            return len(self._running)

    def start(self, chain_id: int, gpus: Optional[int] = None) -> None:
        """Run the claimed chain in a thread of its own (`gpus`: the planner's wider slot for it)."""
        thread = threading.Thread(target=self._run, args=(chain_id, gpus), name=f"opsdctl-chain-{chain_id}",
                                  daemon=True)
        with self._lock:
            self._running[chain_id] = thread
        thread.start()

    def _run(self, chain_id: int, gpus: Optional[int]) -> None:
        state: Optional[State] = None
        try:
            state = ChainRun(self.ctx, chain_id, gpus).run()
        except BaseException as exc:  # the worker's own error: raised in its thread by poll()
            with self._lock:
                self._errors.append(exc)
        finally:
            self.ctx.board.chain_ended(chain_id)
            with self._lock:
                self._running.pop(chain_id, None)
                if state is not None:
                    self._ended.append((chain_id, state))

    def poll(self) -> list[tuple[int, State]]:
        with self._lock:
            out, self._ended = self._ended, []
            error = self._errors.pop(0) if self._errors else None
        if error is not None:
            raise error
        return out

    def close(self) -> None:
        """Stop every chain still running (each stops its stage and is re-queued) and wait for them."""
        with self._lock:
            threads = list(self._running.values())
        if threads and not self.ctx.stop:
            self.ctx.stop.set("the worker is exiting")
        for thread in threads:
            while thread.is_alive():
                thread.join(JOIN_POLL_S)
