"""The lock between taking code snapshots and `opsdctl gc` removing them.

`queue` (and `requeue`) hold it shared from the moment a snapshot is materialized until the
chain that uses it is in the store; `gc` holds it exclusively, so it never removes a snapshot
that a chain is about to be recorded with. A flock on `<runs_dir>/code/.lock`.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from opsdctl.errors import UserError

WAIT_S = 120.0


def lock_path(runs_dir: Path) -> Path:
    return Path(runs_dir) / "code" / ".lock"


@contextmanager
def snapshot_lock(runs_dir: Path, exclusive: bool = False, wait_s: float = WAIT_S) -> Iterator[None]:
    path = lock_path(runs_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UserError(f"runs_dir {runs_dir}: cannot write there ({exc.strerror}); "
                        "fix its permissions or set runs_dir in opsdctl.toml") from None
    try:
        end = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    who = "a queue is taking a code snapshot" if exclusive else "`opsdctl gc` is running"
                    raise UserError(f"{path}: {who}; try again in a moment") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)
