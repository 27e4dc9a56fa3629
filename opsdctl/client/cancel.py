"""`opsdctl cancel`: queued -> cancelled; running -> TERM its stage's process group, KILL after
the grace period, cancelled. Only processes provably started by that stage are signalled.

The state moves first (a guarded transition), so a worker finishing the stage at the same
moment cannot overwrite it; the worker, if alive, sees the change within a second and stops
the stage too (harmless: both verify before signalling). Without a live worker, cancel records
the stage rows itself.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from opsdctl.errors import UserError
from opsdctl.daemon import procs
from opsdctl.client.worker_view import worker_view
from opsdctl.store.engine import Store, get_chain
from opsdctl.store.open_read import open_reader
from opsdctl.store.models import Stage, utcnow
from opsdctl.store.states import State, transition

WORKER_ACK_S = 10.0  # beyond the grace period, how long to wait for a live worker to record the stop


@dataclass
class CancelResult:
    chain_id: int
    was: str
    stopped: int = 0  # stage processes stopped
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        if self.was == State.QUEUED.value:
            return f"chain {self.chain_id}: cancelled (it was queued)"
        s = f"chain {self.chain_id}: cancelled; stopped {self.stopped} stage process{'es' if self.stopped != 1 else ''}"
        return s + "".join(f"; {n}" for n in self.notes)


def cancel_chain(
    store: Store,
    chain_id: int,
    grace: float,
    on_wait: Optional[Callable[[str], None]] = None,
    reason: str = "cancelled by user",
    remote_stop: Optional[Callable[[Stage], Optional[procs.KillReport]]] = None,
) -> CancelResult:
    """`remote_stop` (executor = "ray") stops a stage through the Ray actor that owns it and
    returns None for a stage it does not know; cancel then signals the stage itself."""
    with store.write() as s:
        chain = get_chain(s, chain_id)
        was = chain.state
        if was not in (State.QUEUED.value, State.RUNNING.value):
            raise UserError(f"chain {chain_id} is already {was}; nothing to cancel")
        if not transition(s, chain_id, State(was), State.CANCELLED, reason=reason):
            raise UserError(f"chain {chain_id} changed state while cancelling; run `opsdctl status` and retry")
    result = CancelResult(chain_id, was)
    if was == State.QUEUED.value:
        return result

    reader = open_reader(store)
    worker_alive = worker_view(reader.latest_worker())["state"] == "running"
    deadline = time.monotonic() + grace + WORKER_ACK_S
    while True:
        live = [st for st in reader.stages_of(chain_id) if st.state == State.RUNNING.value]
        for st in live:
            rep = remote_stop(st) if remote_stop is not None else None
            if rep is not None and getattr(rep, "via", ""):
                result.notes.append(f"its {st.name} stage: {rep.via}")
            if rep is None and st.host and st.host != socket.gethostname():
                result.notes.append(f"its {st.name} stage runs on {st.host}; stop it there")
                continue
            ident = procs.StageIdentity(st.pgid, st.pid, st.create_time, st.token)

            def waiting(left: float, n: int, name=st.name) -> None:
                if on_wait:
                    on_wait(f"chain {chain_id}: {name}: TERM sent to {n} process{'es' if n != 1 else ''}; KILL in {left:.0f}s")

            if rep is None:
                rep = procs.stop_stage(ident, grace, on_wait=waiting)
            result.stopped += rep.found
            if rep.unverified_group:
                result.notes.append(f"process group {st.pgid} is not provably ours; left alone")
            if rep.survivors:
                result.notes.append(f"pids {rep.survivors} survived SIGKILL")
        if not live:
            break
        if not worker_alive:
            with store.write() as s:
                for st in live:
                    row = s.get(Stage, st.id)
                    if row.state == State.RUNNING.value:
                        row.state = State.CANCELLED.value
                        row.finished_at = utcnow()
                        row.reason = reason
            break
        if time.monotonic() > deadline:
            result.notes.append("the worker has not recorded the stage's end yet")
            break
        if on_wait:
            on_wait(f"chain {chain_id}: waiting for the worker to record the stop")
        time.sleep(0.2)
    return result
