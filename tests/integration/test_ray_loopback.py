"""The Ray that opsdctl starts itself (`executor = "ray"`, no `ray_address`) listens on loopback
only: its GCS server, raylet, dashboard and runtime-env agents, metrics exporter and workers bound
every interface (or the machine's external address), where a client with no credentials ran code.
Checked with psutil on every listening socket of the worker's process tree while a chain runs."""

from __future__ import annotations

import ipaddress

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
