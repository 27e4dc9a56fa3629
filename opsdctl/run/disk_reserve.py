"""A few MiB kept beside the SQLite store, given back when a full disk would leave a chain `running`.

When the disk under the store fills (a stage's scratch files, another user's), the worker stops
the stage and re-queues its chain; that write needs room in SQLite's journal too. When the space
was taken by someone else, stopping the stage frees none, the re-queue could not be written, and
the chain stayed `running` until the next worker start. The worker keeps this file while it runs
and deletes it when a store write fails on a full disk, so the re-queue is written at once. A
PostgreSQL store's disk is its server's: nothing to keep here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

RESERVE_BYTES = 8 << 20  # SQLite's journal for the re-queue needs a few pages; the rest is margin
CHUNK = 1 << 20
SUFFIX = ".reserve"


def reserve_path(sqlite_path: Optional[Path]) -> Optional[Path]:
    if sqlite_path is None:
        return None
    return Path(str(sqlite_path) + SUFFIX)  # a sidecar of the store: never in a code snapshot


def keep(path: Optional[Path]) -> None:
    """Write the reserve (real blocks, not a sparse file) if it is missing or short."""
    if path is None:
        return
    try:
        if path.stat().st_size >= RESERVE_BYTES:
            return
    except FileNotFoundError:
        pass
    try:
        with open(path, "wb") as f:
            for _ in range(RESERVE_BYTES // CHUNK):
                f.write(b"\0" * CHUNK)
            f.flush()
            os.fsync(f.fileno())
    except OSError:  # no room for it now: the worker runs without, as before
        try:
            path.unlink()
        except OSError:
            pass


def release(path: Optional[Path]) -> bool:
    """Give the reserve's space back; True when there was one."""
    if path is None:
        return False
    try:
        path.unlink()
        return True
    except OSError:
        return False
