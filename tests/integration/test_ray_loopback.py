"""The Ray that opsdctl starts itself (`executor = "ray"`, no `ray_address`) listens on loopback
only: its GCS server, raylet, dashboard and runtime-env agents, metrics exporter and workers bound
every interface (or the machine's external address), where a client with no credentials ran code.
Checked with psutil on every listening socket of the worker's process tree while a chain runs.
Its token and temp dir are the user's alone (opsdctl/daemon/ray_local.py)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import stat
import tempfile
from pathlib import Path

import psutil
import pytest
from conftest import default_config, stop_process, wait_for

pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def _listening(root_pid: int) -> set[tuple[str, str, int]]:
    try:
        root = psutil.Process(root_pid)
        pids = {root.pid} | {p.pid for p in root.children(recursive=True)}
    except psutil.Error:
        return set()
    out = set()
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            try:
                name = psutil.Process(c.pid).name()
            except psutil.Error:
                name = "?"
            out.add((name, c.laddr.ip, c.laddr.port))
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if getattr(addr, "ipv4_mapped", None) is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def test_a_local_ray_binds_loopback_only_while_a_chain_runs(ws):
    ws.write_config(default_config(extra='executor = "ray"'))
    ws.env = {"FAKE_STEPS": "4000", "FAKE_STEP_SECONDS": "0.05"}
    ws.cli("queue", "baseline")
    worker = ws.popen("worker")
    try:
        wait_for(lambda: ws.sql("select pid from stage where chain_id = 1 and name = 'train' and pid is not null"),
                 timeout=180, what="the chain's train stage to run on Ray")
        sockets = _listening(worker.pid)
        names = {name for name, _, _ in sockets}
        assert {"gcs_server", "raylet"} <= names, sockets  # Ray's servers are there to look at
        assert any("Agent" in n for n in names), sockets
        exposed = sorted(s for s in sockets if not _loopback(s[1]))
        assert not exposed, f"listening beyond loopback: {exposed}"
    finally:
        stop_process(worker, timeout=120)


def _writable_by_others(path) -> bool:
    """Whether a user other than the owner could create a file in `path`: it needs search (x) on
    every directory above it and write on it, through the group or other bits (we own them all)."""
    p = Path(path).resolve()
    if not stat.S_IMODE(os.stat(p).st_mode) & 0o022:
        return False
    return all(stat.S_IMODE(os.stat(a).st_mode) & 0o011 for a in p.parents)


def test_a_local_rays_token_and_session_dir_are_the_users_alone(ws, tmp_path):
    """Ray writes ~/.ray/auth_token with the umask (0644) and makes its temp tree 0777: the worker
    writes the token 0600 in a 0700 ~/.ray first, and gives Ray a 0700 temp dir of its own under
    RAY_TMPDIR, removed when the worker exits."""
    home = tmp_path / "home"
    home.mkdir()
    tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths stay under 107 bytes
    os.chmod(tmp, 0o777)  # a shared temp dir, as /tmp is
    ws.write_config(default_config(extra='executor = "ray"'))
    ws.env = {"FAKE_STEPS": "4000", "FAKE_STEP_SECONDS": "0.05", "HOME": str(home), "RAY_TMPDIR": str(tmp)}
    ws.cli("queue", "baseline")
    worker = ws.popen("worker")
    try:
        wait_for(lambda: worker.poll() is not None or ws.sql(
            "select pid from stage where chain_id = 1 and name = 'train' and pid is not null"),
                 timeout=180, what="the chain's train stage to run on Ray")
        assert worker.poll() is None, worker.stdout.read()
        token = home / ".ray" / "auth_token"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600 and token.stat().st_size > 0
        assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
        (private,) = tmp.glob("opsdctl-ray-*")
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        session = (private / "ray" / "session_latest").resolve()
        assert session.is_dir() and (session / "sockets").is_dir()
        for d in (session, session / "sockets", session / "logs"):
            assert not _writable_by_others(d), d
        assert _writable_by_others(tmp)  # the helper sees what is shared
        stop_process(worker, timeout=120)
        # a clean exit, not Ray's failure-signal handler aborting it (SIGABRT): exit hooks ran
        assert worker.returncode >= 0, worker.stdout.read()[-2000:]
        assert not list(tmp.glob("opsdctl-ray-*"))  # removed at exit
    finally:
        stop_process(worker, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
