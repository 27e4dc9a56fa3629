"""A stage child that calls setsid and clears its environment (no group, no stage token) is
still reached by `opsdctl cancel` and by the worker's SIGTERM: one that still has its parent (a
descendant of the stage's leader), and one orphaned at once (adopted by the worker, its subreaper).
Before, both survived."""

from __future__ import annotations

import os
import shutil
import signal

import pytest
from conftest import default_config, pid_alive, wait_for

ESCAPE = """\
#!/bin/sh
# $1: the stage dir. Two children leave the stage's group and environment:
setsid env -i /bin/sh -c 'echo $$ > "$0/kept.pid"; exec {sleep} 600' "$1" &
( setsid env -i /bin/sh -c 'echo $$ > "$0/orphan.pid"; exec {sleep} 600' "$1" & )
exec {sleep} 600
"""


def _escapees(ws) -> list[int] | None:
    stage = ws.runs / "1" / "train"
    pids = []
    for name in ("kept.pid", "orphan.pid"):
        f = stage / name
        if not f.is_file() or not f.read_text().strip():
            return None
        pids.append(int(f.read_text()))
    return pids


def _setup(ws) -> None:
    script = ws.root / "escape.sh"
    script.write_text(ESCAPE.format(sleep=shutil.which("sleep")))
    ws.write_config(default_config(train=f"/bin/sh {script} {{stage_dir}}"))
    ws.cli("queue", "baseline")


def _cleanup(pids) -> None:
    for pid in pids or []:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _not_in_our_group(pids, leader_pgid) -> None:
    for pid in pids:
        assert os.getpgid(pid) != leader_pgid and "OPSDCTL_STAGE_TOKEN" not in open(f"/proc/{pid}/environ").read()


@pytest.mark.parametrize("how", ["cancel", "sigterm"])
def test_escaped_stage_children_are_reached(ws, how):
    _setup(ws)
    worker = ws.popen("worker")
    pids = None
    try:
        pids = wait_for(lambda: _escapees(ws), timeout=60, what="the stage's escaped children")
        pgid = ws.sql("select pgid from stage where chain_id = 1")[0][0]
        _not_in_our_group(pids, pgid)
        if how == "cancel":
            ws.cli("cancel", "1")
        else:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        wait_for(lambda: not any(pid_alive(p) for p in pids), timeout=30, what="the escaped children to be stopped")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        _cleanup(pids)


def test_lineage_takes_orphans_of_other_sessions_never_a_plain_child():
    """A child in another session that is no stage leader is an adopted orphan; a plain child the
    host program starts meanwhile (same session) is not the stage's and is never listed."""
    import subprocess

    from opsdctl.run import subreaper

    sleep = shutil.which("sleep")
    plain = subprocess.Popen([sleep, "30"])
    orphan_like = subprocess.Popen([sleep, "30"], start_new_session=True)
    try:
        listed = {p.pid for p in subreaper.lineage(leader=os.getpid() + 10**7, known=set())}
        assert orphan_like.pid in listed and plain.pid not in listed
    finally:
        for p in (plain, orphan_like):
            p.kill()
            p.wait()
