"""What the worker is doing now, for `status`: one line per running chain, and the loop's own note.

The worker row's `activity` is one text: each running chain's line ("chain 3: train (pid 812)")
in chain order, then the loop's note ("waiting: ...", "idle: ...") when it has one. A chain's
line goes when the chain ends; a chain's news clears a stale loop note. The heartbeat is
written with it, and on its own at most every HEARTBEAT_S, whichever chain's thread asks.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from opsdctl.store.models import WorkerRun, utcnow

HEARTBEAT_S = 10.0


class ActivityBoard:
    def __init__(self, store, worker_run_id: Optional[int]):
        self.store = store
        self.worker_run_id = worker_run_id  # None: nothing is written (a Ray node's chain)
        self._lock = threading.Lock()
        self._chains: dict[int, str] = {}
        self._note: Optional[str] = None
        self._last_beat = 0.0

    def chain(self, chain_id: int, text: str) -> None:
        with self._lock:
            self._chains[chain_id] = text
            self._note = None
            self._write()

    def chain_ended(self, chain_id: int) -> None:
        with self._lock:
            self._chains.pop(chain_id, None)

    def loop(self, text: str) -> None:
        """The loop's note; with no chain running, exactly the text (as with one chain at a time)."""
        with self._lock:
            self._note = text
            self._write()

    def text(self) -> str:
        with self._lock:
            return self._text()

    def heartbeat(self) -> None:
        if self.worker_run_id is None or time.monotonic() - self._last_beat < HEARTBEAT_S:
            return
        with self._lock:
            self._last_beat = time.monotonic()
            with self.store.write() as s:
                s.get(WorkerRun, self.worker_run_id).heartbeat_at = utcnow()

    def _text(self) -> str:
        parts = [self._chains[c] for c in sorted(self._chains)]
        if self._note:
            parts.append(self._note)
        return "; ".join(parts)

    def _write(self) -> None:
        if self.worker_run_id is None:
            return
        with self.store.write() as s:
            row = s.get(WorkerRun, self.worker_run_id)
            row.activity = self._text()
            row.heartbeat_at = utcnow()
        self._last_beat = time.monotonic()
