"""One worker per store: the lock a worker holds for its whole life.

- SQLite (and any other non-PostgreSQL store): a non-blocking exclusive flock on
  `<db>.worker.lock` next to the database file (for other databases, a file per store URL under
  runs_dir); the file names the holder. The kernel drops it when the process dies.
- PostgreSQL: a session-level `pg_try_advisory_lock` taken on a connection of its own, kept open
  for the worker's life. It is per database, so it holds across every machine that points at
  the store (store_wide); the server drops it when that session ends, i.e. when the worker dies
  or its connection is cut. The session's application_name names the holder.

A second worker raises WorkerBusy naming the holder, and touches nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from sqlalchemy import text

from opsdctl.errors import UserError

LOCK_CLASS = 0x6F707364  # "opsd": the first key of opsdctl's PostgreSQL advisory locks
WORKER_KEY = 1  # second key: the one-worker-per-store lock
MIGRATION_KEY = 2  # second key: schema upgrades (a transaction lock, see store.py)
WRITE_KEY = 3  # second key: one write transaction at a time, as BEGIN IMMEDIATE on SQLite
APP_PREFIX = "opsdctl-worker"


class WorkerBusy(UserError):
    """Another worker holds this store."""

    exit_code = 3


@dataclass(frozen=True)
class HeldLock:
    kind: str  # "flock" | "advisory"
    where: str  # the lock file, or the store's safe URL
    store_wide: bool  # True: no other worker on any host can hold this store now


def worker_lock_path(cfg, store) -> Path:
    db = store.sqlite_path
    if db is not None:
        return Path(str(db) + ".worker.lock")
    return cfg.runs_dir / f".worker-{hashlib.sha256(store.safe_url().encode()).hexdigest()[:16]}.lock"


@contextmanager
def worker_lock(cfg, store) -> Iterator[HeldLock]:
    if store.dialect == "postgresql":
        with _advisory_lock(store) as held:
            yield held
    else:
        with _file_lock(worker_lock_path(cfg, store)) as held:
            yield held


@contextmanager
def _file_lock(path: Path) -> Iterator[HeldLock]:
    """A non-blocking exclusive flock held while the context is open; the file names the holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise WorkerBusy(
                f"another worker (pid {holder.split()[0]}) already runs on this store ({path}); "
                "stop it first, or use `opsdctl status` to see what it does"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        # A flock is only as wide as the file system shares it (NFS may keep it per host), so
        # recovery still leaves chains claimed on other hosts to those hosts.
        yield HeldLock("flock", str(path), store_wide=False)
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def _advisory_lock(store) -> Iterator[HeldLock]:
    conn = store.engine.connect()
    try:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # never "idle in transaction"
        me = f"{APP_PREFIX} {os.getpid()} {socket.gethostname()}"[:63]
        conn.execute(text("SELECT set_config('application_name', :name, false)"), {"name": me})
        got = conn.execute(
            text("SELECT pg_try_advisory_lock(CAST(:c AS integer), CAST(:k AS integer))"),
            {"c": LOCK_CLASS, "k": WORKER_KEY},
        ).scalar()
        if not got:
            raise WorkerBusy(
                f"another worker ({_holder(conn)}) already runs on this store ({store.safe_url()}); "
                "stop it first, or use `opsdctl status` to see what it does"
            )
        yield HeldLock("advisory", store.safe_url(), store_wide=True)
    finally:
        # Close the session itself rather than hand it back to the pool: the server then drops
        # the lock for certain, and no later user of the pool inherits it.
        try:
            conn.invalidate()
        finally:
            conn.close()


def _holder(conn) -> str:
    """'pid N on HOST' of the session holding the worker lock, from its application_name."""
    try:
        name = conn.execute(
            text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = CAST(:c AS oid) "
                "AND l.objid = CAST(:k AS oid) AND l.objsubid = 2 "
                # advisory locks are per database: the holder of another store on this server is not ours
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
            {"c": LOCK_CLASS, "k": WORKER_KEY},
        ).scalar()
    except Exception:
        name = None
    parts = (name or "").split()
    if len(parts) >= 3 and parts[0] == APP_PREFIX:
        return f"pid {parts[1]} on {parts[2]}"
    return "pid unknown"
