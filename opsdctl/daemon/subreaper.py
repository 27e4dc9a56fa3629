"""Reach a stage's descendants that left its process group and its environment.

A stage child that calls setsid and clears its environment (`setsid env -i ...`) is in no group
of ours and carries no stage token, so procs.stop_stage could not prove it ours and it survived
cancel and the worker's SIGTERM. Two facts still tie it to the stage:
- while its parent lives, it is a descendant of the stage's leader;
- once its parent exits, Linux gives it to the nearest ancestor that declared itself a child
  subreaper (prctl PR_SET_CHILD_SUBREAPER) instead of init: the worker declares itself one, so an
  orphan of a stage becomes the worker's own child. A child of the worker that is neither a
  stage leader nor one it had before the stage started, and that runs in another session than
  the worker's (every stage starts its own; a plain subprocess the worker or its host program
  starts meanwhile stays in the worker's), is a stage's orphan.
`lineage()` lists both; the executor hands it to procs.stop_stage. With several chains running
at once (opsdctl.daemon.lineages), an adopted orphan is a stage's only when that stage's watch
saw it among its descendants, or when no other chain runs a stage. What remains out of reach
(docs/reliability.md): descendants of a worker that was SIGKILLed (they go to init), processes
started through another service (systemd-run, at, ssh, a container runtime), and other users'.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Callable, Iterable

import psutil

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become() -> bool:
    """Make this process the subreaper of its descendants; False where the kernel cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children() -> set[int]:
    try:
        return {c.pid for c in psutil.Process().children()}
    except psutil.Error:
        return set()


def lineage(leader: int, known: Iterable[int], ours: Callable[[int], bool] = lambda pid: True) -> list[psutil.Process]:
    """The stage's processes by descent: the leader's descendants now, and the orphans this
    process adopted (its children other than `known`: stage leaders, and the children it had
    before the stage started) that `ours` gives this stage (with several chains running, an
    orphan is a stage's only if the stage was seen as its ancestor). Adopted orphans that
    already exited are reaped here."""
    out: dict[int, psutil.Process] = {}
    try:
        for p in psutil.Process(leader).children(recursive=True):
            out[p.pid] = p
    except psutil.Error:
        pass
    skip = set(known) | {leader}
    try:
        mine = psutil.Process().children()
    except psutil.Error:
        mine = []
    own_session = os.getsid(0)
    for child in mine:
        if child.pid in skip or _session(child.pid) in (own_session, None):
            continue
        if _reaped(child.pid) or not ours(child.pid):
            continue
        out[child.pid] = child
        try:
            for p in child.children(recursive=True):
                out[p.pid] = p
        except psutil.Error:
            pass
    return list(out.values())


def _session(pid: int):
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _reaped(pid: int) -> bool:
    """Collect an adopted child that has exited (a zombie of ours otherwise); True if it had."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid
