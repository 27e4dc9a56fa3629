"""Bad environments and worker failures: a second signal kills now; a worker
error re-queues its chain; a disk that fills or a read-only runs_dir stops the worker with one
line, its chain re-queued, the other queued chains untouched.

The disk and read-only cases run in a private mount namespace (`unshare -rm`: a small tmpfs,
a read-only bind mount), so they are a real full disk and a real read-only file system.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO, clean_env, default_config, opsdctl_argv, pid_alive, stage_pids, stop_process, wait_for
from gates import DefaultGate


# --- a second signal ------------------------------------------------------------------------


def test_a_second_sigterm_kills_now_not_after_the_grace(ws):
    ws.write_config(default_config(grace=60))
    ws.env = {"FAKE_CHILD": "1", "FAKE_IGNORE_TERM": "1", "FAKE_STEPS": "2000", "FAKE_STEP_SECONDS": "0.05"}
    ws.cli("queue", "baseline")
    worker = ws.popen("worker")
    try:
        leader, child, _ = wait_for(lambda: stage_pids(ws, 1, "train"), timeout=60, what="the train stage")
        worker.send_signal(signal.SIGTERM)
        wait_for(lambda: not pid_alive(leader), timeout=20, what="the leader to take the TERM")
        time.sleep(1.0)
        assert worker.poll() is None and pid_alive(child)  # the child ignores TERM: the grace runs
        t0 = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if worker.poll() is None:
            stop_process(worker)
    assert took < 15, f"the second SIGTERM took {took:.1f}s (grace 60 s)\n{out}"
    assert "killing now" in out and not pid_alive(child)
    assert ws.state(1) == "interrupted"


# --- a worker error -------------------------------------------------------------------------


class _EvalCheckCrashes(DefaultGate):
    def grant(self, chain, stage):
        if stage == "eval":
            raise RuntimeError("the eval check crashed")
        return super().grant(chain, stage)


def test_a_worker_error_re_queues_the_chain_it_was_running(ws):
    """A crash at the eval check left a trained chain interrupted and never re-queued."""
    from opsdctl.config import load_config
    from opsdctl.run.worker import Worker
    from opsdctl.store.engine import open_store

    ws.cli("queue", "baseline")
    cfg = load_config(ws.root / "opsdctl.toml")
    lines = []
    with pytest.raises(RuntimeError, match="the eval check crashed"):
        Worker(cfg, open_store(cfg.db), drain=True, gate=_EvalCheckCrashes(()), report=lines.append).run()
    assert ws.sql("select id, state, requeued_from from chain order by id") == [(1, "interrupted", None), (2, "queued", 1)]
    assert "worker error: RuntimeError: the eval check crashed" in ws.sql("select reason from chain where id = 1")[0][0]
    assert ws.sql("select name, state from stage where chain_id = 1") == [("train", "succeeded")]
    assert any("re-queued as chain 2" in line for line in lines)


# --- a real full disk, a real read-only runs_dir -----------------------------------------------


def _namespaces_work() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt 2>/dev/null || "
                            "mount -t tmpfs -o size=1m tmpfs /tmp"], capture_output=True)
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(not _namespaces_work(), reason="needs unshare -rm (user + mount namespaces)")


def _in_private_mounts(script: str, tmp_path, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run a shell script in its own user + mount namespace; what it mounts nobody else sees."""
    env = clean_env({"OPSDCTL": " ".join(opsdctl_argv()), "PY": sys.executable})
    return subprocess.run(["unshare", "-rm", "sh", "-euc", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)


FILLER = textwrap.dedent("""\
    import os, sys, time
    # Fill the disk with a file nobody can see (unlinked, held open): the space comes back
    # only when this process dies, as with a stage's own scratch files.
    f = open(os.path.join(sys.argv[1], "scratch"), "wb")
    os.unlink(f.name)
    try:
        while True:
            f.write(b"0" * 65536)
            f.flush()
    except OSError:
        pass
    time.sleep(600)
""")


@needs_namespaces
def test_a_disk_that_fills_mid_chain_stops_the_worker_in_one_line(tmp_path):
    disk = tmp_path / "disk"
    out = tmp_path / "out"
    disk.mkdir(), out.mkdir()
    (tmp_path / "filler.py").write_text(FILLER)
    config = default_config(train=f"{sys.executable} {tmp_path / 'filler.py'} {{stage_dir}}")
    (tmp_path / "opsdctl.toml.in").write_text(config)
    res = _in_private_mounts(textwrap.dedent(f"""\
        mount -t tmpfs -o size=16m tmpfs {disk}
        cp -r {REPO / 'recipes'} {disk}/recipes
        cp {tmp_path / 'opsdctl.toml.in'} {disk}/opsdctl.toml
        cd {disk}
        $OPSDCTL queue baseline --repeats 2 > {out}/queue.txt
        rc=0; $OPSDCTL worker --drain > {out}/worker.out 2> {out}/worker.err || rc=$?
        echo $rc > {out}/worker.rc
        $OPSDCTL status --json > {out}/status.json
        df -k {disk} > {out}/df.txt
    """), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    err = (out / "worker.err").read_text()
    worker_out = (out / "worker.out").read_text()
    assert (out / "worker.rc").read_text().strip() == "2", worker_out + err
    assert "Traceback" not in err + worker_out and len(err.strip().splitlines()) == 1, err
    assert "worker stopped" in err and "re-queued as chain 3" in err, err
    chains = {c["chain_id"]: c for c in json.loads((out / "status.json").read_text())["chains"]}
    assert chains[1]["state"] == "interrupted" and "database or disk is full" in chains[1]["reason"]
    assert chains[2]["state"] == "queued" and chains[3]["state"] == "queued"  # re-queued; the other untouched
    assert all(st["state"] != "running" for st in chains[1]["stages"])


@needs_namespaces
def test_a_read_only_runs_dir_gives_one_line_and_stops_the_worker(tmp_path):
    ws = tmp_path / "ws"
    out = tmp_path / "out"
    ws.mkdir(), out.mkdir()
    shutil.copytree(REPO / "recipes", ws / "recipes")
    (ws / "opsdctl.toml").write_text(default_config())
    argv = opsdctl_argv()
    subprocess.run([*argv, "queue", "baseline", "--repeats", "3"], cwd=ws, env=clean_env(), check=True,
                   capture_output=True)
    (ws / "runs").mkdir(exist_ok=True)
    res = _in_private_mounts(textwrap.dedent(f"""\
        mount --bind {ws / 'runs'} {ws / 'runs'}
        mount -o remount,bind,ro {ws / 'runs'}
        cd {ws}
        rc=0; $OPSDCTL queue token-clip > {out}/queue.out 2> {out}/queue.err || rc=$?; echo $rc > {out}/queue.rc
        rc=0; $OPSDCTL worker --drain > {out}/worker.out 2> {out}/worker.err || rc=$?; echo $rc > {out}/worker.rc
    """), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    queue_err = (out / "queue.err").read_text()
    assert (out / "queue.rc").read_text().strip() == "2" and len(queue_err.strip().splitlines()) == 1, queue_err
    assert "runs_dir" in queue_err and "Read-only file system" in queue_err
    err = (out / "worker.err").read_text()
    assert (out / "worker.rc").read_text().strip() == "2", err
    assert len(err.strip().splitlines()) == 1 and "read-only file system" in err and "Traceback" not in err, err
    con = __import__("sqlite3").connect(ws / "runs.db")
    rows = con.execute("select id, state, requeued_from from chain order by id").fetchall()
    assert rows == [(1, "interrupted", None), (2, "queued", None), (3, "queued", None), (4, "queued", 1)], rows
    assert con.execute("select count(*) from variant where name = 'token-clip'").fetchone() == (0,)
