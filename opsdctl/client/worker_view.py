"""Is the store's worker alive, and what is it doing: one view for `status` and `cancel`."""

from __future__ import annotations

import socket

from opsdctl.daemon import procs
from opsdctl.store.values import iso


def worker_view(w) -> dict:
    """`w`: the latest worker_run row (a reader record or the model), or None."""
    if w is None:
        return {"state": "none", "pid": None, "text": "no worker has run on this store"}
    alive = w.stopped_at is None and (
        w.host != socket.gethostname() or procs.process_alive(w.pid, w.create_time)
    )
    base = {"pid": w.pid, "host": w.host, "started_at": iso(w.started_at), "heartbeat_at": iso(w.heartbeat_at),
            "activity": w.activity, "drain": w.drain}
    if alive:
        return {**base, "state": "running", "text": f"pid {w.pid} running ({w.activity or 'working'})"}
    if w.stopped_at is None:
        return {**base, "state": "dead",
                "text": f"pid {w.pid} died without stopping cleanly; the next worker re-queues what it ran"}
    return {**base, "state": "stopped", "stopped_at": iso(w.stopped_at), "exit_reason": w.exit_reason,
            "text": f"not running (last: pid {w.pid}, {w.exit_reason or 'stopped'})"}
