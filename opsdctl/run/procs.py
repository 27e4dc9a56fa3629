"""Find and stop a stage's processes, and only those.

A stage runs in its own session, so its process tree is one process group whose id is the
leader's pid. Before any signal we prove the group is ours: the recorded leader is alive with
the recorded start time, or some member carries the stage's unique OPSDCTL_STAGE_TOKEN in its
environment. Processes that escaped the group (their own setsid) but still carry the token are
ours too and are signalled one by one, as are those the stage's parent proves its by descent
(opsdctl.run.subreaper: escaped the group and dropped the token). Anything we cannot prove is left
alone: a pid that was reused by someone else's process is never signalled. There is no pkill here,
ever.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import psutil

from opsdctl.run.stages import ENV_STAGE_TOKEN

CREATE_TIME_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class StageIdentity:
    pgid: Optional[int]
    pid: Optional[int]
    create_time: Optional[float]
    token: str


@dataclass
class KillReport:
    found: int = 0  # verified live processes when we started
    signalled: list[int] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)  # still alive after KILL (should be empty)
    unverified_group: bool = False  # the group exists but nothing in it is provably ours

    def summary(self) -> str:
        if self.found == 0:
            return "no stage processes were left"
        s = f"stopped {self.found} stage process{'es' if self.found != 1 else ''}"
        if self.survivors:
            s += f"; {len(self.survivors)} did not exit: {', '.join(map(str, self.survivors))}"
        return s


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _has_token(p: psutil.Process, token: str) -> bool:
    if not token:
        return False
    try:
        return p.environ().get(ENV_STAGE_TOKEN) == token
    except (psutil.Error, OSError):
        return False


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError, OSError):
        return None


def leader_is_ours(ident: StageIdentity) -> bool:
    if not ident.pid or ident.create_time is None:
        return False
    try:
        p = psutil.Process(ident.pid)
        return abs(p.create_time() - ident.create_time) <= CREATE_TIME_TOLERANCE_S
    except psutil.Error:
        return False


def stage_processes(ident: StageIdentity) -> tuple[list[psutil.Process], bool]:
    """Live processes provably belonging to the stage, and whether its group is verified ours.

    Group members count when the group is verified (leader matches, or any member carries the
    token); processes outside the group count only with the token.
    """
    members: list[psutil.Process] = []
    tokened: list[psutil.Process] = []
    my_pid = os.getpid()
    for p in psutil.process_iter():
        if p.pid == my_pid:
            continue
        in_group = ident.pgid is not None and _pgid(p.pid) == ident.pgid
        if in_group:
            members.append(p)
        elif _has_token(p, ident.token):
            tokened.append(p)
    group_ours = bool(members) and (leader_is_ours(ident) or any(_has_token(p, ident.token) for p in members))
    procs = [p for p in members if _alive(p)] if group_ours else []
    procs += [p for p in tokened if _alive(p)]
    return procs, group_ours


def group_exists_unverified(ident: StageIdentity) -> bool:
    if ident.pgid is None:
        return False
    for p in psutil.process_iter():
        if _pgid(p.pid) == ident.pgid and _alive(p):
            return True
    return False


def stop_stage(
    ident: StageIdentity,
    grace: float,
    on_wait: Optional[Callable[[float, int], None]] = None,
    reap: Optional[Callable[[], None]] = None,
    cut_short: Optional[Callable[[], bool]] = None,
    lineage: Optional[Callable[[], list[psutil.Process]]] = None,
) -> KillReport:
    """TERM the stage's verified processes (its group, and token carriers outside it), wait up
    to `grace` seconds, then KILL what is left. `reap` lets a parent collect its zombie child;
    `cut_short` is asked while waiting: True ends the grace period now (a second Ctrl-C).
    `lineage` (the parent that started the stage: opsdctl.run.subreaper) adds the processes
    that are the stage's by descent, which escaped its group and dropped its token."""
    procs, group_ours = stage_processes(ident)
    procs = _with_lineage(procs, lineage)
    report = KillReport(found=len(procs))
    if not procs:
        report.unverified_group = (not group_ours) and group_exists_unverified(ident)
        return report
    _signal(ident, procs, group_ours, signal.SIGTERM, report)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if reap:
            reap()
        left = [p for p in procs if _alive(p)]
        if not left or (cut_short is not None and cut_short()):
            break
        if on_wait:
            on_wait(deadline - time.monotonic(), len(left))
        time.sleep(0.05)
    left = _with_lineage([p for p in procs if _alive(p)], lineage)  # and orphans adopted meanwhile
    if left or (group_ours and ident.pgid is not None and _group_alive(ident.pgid)):
        # Re-list: a child may have been born while we waited; it is in the group too.
        more, still_ours = stage_processes(ident)
        _signal(ident, left + more, group_ours and still_ours, signal.SIGKILL, report)
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            if reap:
                reap()
            if not any(_alive(p) for p in left + more):
                break
            time.sleep(0.05)
        report.survivors = sorted({p.pid for p in left + more if _alive(p)})
    if reap:
        reap()
    return report


def _with_lineage(procs: list[psutil.Process], lineage) -> list[psutil.Process]:
    if lineage is None:
        return procs
    seen = {p.pid for p in procs}
    return procs + [p for p in lineage() if p.pid not in seen and _alive(p)]


def _group_alive(pgid: int) -> bool:
    for p in psutil.process_iter():
        if _pgid(p.pid) == pgid and _alive(p):
            return True
    return False


def _signal(ident: StageIdentity, procs, group_ours: bool, sig: int, report: KillReport) -> None:
    if group_ours and ident.pgid is not None:
        try:
            os.killpg(ident.pgid, sig)
            report.signalled.append(-ident.pgid)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        if ident.pgid is not None and _pgid(p.pid) == ident.pgid and group_ours:
            continue  # already reached through the group
        try:
            p.send_signal(sig)  # psutil checks the pid was not reused since we listed it
            report.signalled.append(p.pid)
        except psutil.Error:
            pass


def descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


# psutil's start time is the boot time (/proc/stat btime: whole seconds, moved by NTP slewing and
# VM clock steps) plus the start in ticks since boot, so a live process can read a second or more
# away from what was recorded when it started; "dead" for a live worker misleads status, wait and
# cancel. A reused pid starts after the recorded process died, and a worker lives far longer than
# this, so the wider tolerance cannot mistake a stranger for it. (Stages also carry their token.)
LONG_LIVED_TOLERANCE_S = 2.5


def process_alive(pid: Optional[int], create_time: Optional[float]) -> bool:
    """True when the long-lived process `pid` (a worker) runs and, if given, started at
    `create_time` (LONG_LIVED_TOLERANCE_S): the same process."""
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        if create_time is not None and abs(p.create_time() - create_time) > LONG_LIVED_TOLERANCE_S:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def create_time_of(pid: int) -> Optional[float]:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
