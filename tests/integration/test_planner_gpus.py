"""The GPU gate (opsdctl.daemon.gpu_probe + gpu_gate: check/released) with the NVML stand-in (FakeProbe)
behind the same interface: index mapping, the check, and real worker subprocesses that wait
for a GPU held by a foreign process, report the holder, never touch it, skip after
gpu_wait_minutes, and wait for a stage's own processes to free their memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAKE_TRAIN, STAGES, default_config, pid_alive, wait_for
from support.gpus import h100, write_gpus

from opsdctl.daemon.gpu_gate import GpuGate, GpuGateSettings
from opsdctl.daemon.gpu_probe import FakeProbe, ProbeUnavailable
from opsdctl.plan.gate import Grant, Skip, Wait

GPU_USER = STAGES / "fake_gpu_user.py"


@pytest.fixture
def foreign():
    """A process opsdctl did not start (its own session, like another user's job)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_fake_probe_reads_the_file_each_time_and_frees_dead_processes(tmp_path, foreign):
    path = tmp_path / "gpus.json"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_gpus(path, [h100(0, [(foreign.pid, 61000), (dead.pid, 5000)])], free_dead_after_s=0.3)
    probe = FakeProbe(path, inherited=None, use_env=False)
    inv = probe.inventory()
    assert inv[0].used_mib == 66000 and inv[0].free_mib == 81559 - 66000
    assert {p.pid for p in inv[0].processes} == {foreign.pid, dead.pid}  # the driver's lag
    assert next(p for p in inv[0].processes if p.pid == foreign.pid).name.startswith("python")
    time.sleep(0.35)
    assert {p.pid for p in probe.inventory()[0].processes} == {foreign.pid}
    write_gpus(path, [h100(0)])
    assert probe.inventory()[0].free_mib == 81559
    write_gpus(path, [], unavailable="NVML Shared Library Not Found")
    with pytest.raises(ProbeUnavailable):
        probe.inventory()


def test_gate_waits_then_grants_then_skips_after_the_wait_bound(tmp_path, foreign):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(0, [(foreign.pid, 61000)]), h100(1)])
    now = [0.0]
    gate = GpuGate(GpuGateSettings(min_free_mib=70000, wait_s=60, poll_s=2),
                   FakeProbe(path, inherited=None, use_env=False), clock=lambda: now[0])
    d = gate.check(1, "train", (0, 1))
    assert isinstance(d, Wait) and f"pid {foreign.pid}" in d.reason and "61000 MiB" in d.reason and d.seconds == 2
    now[0] = 30.0
    assert isinstance(gate.check(1, "train", (0, 1)), Wait)
    write_gpus(path, [h100(0), h100(1)])  # the holder let go
    g = gate.check(1, "train", (0, 1))
    assert isinstance(g, Grant) and g.gpus == (0, 1) and dict(g.env) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert g.visible is None
    assert isinstance(gate.check(2, "train", (1,)), Grant)  # a slot's check looks at its own GPUs only
    write_gpus(path, [h100(0, [(foreign.pid, 61000)]), h100(1)])
    assert isinstance(gate.check(2, "eval", (1,)), Grant)
    assert isinstance(gate.check(1, "eval", (0, 1)), Wait)
    now[0] = 91.0
    d = gate.check(1, "eval", (0, 1))
    assert isinstance(d, Skip) and "gpu_wait_minutes" in d.reason and f"pid {foreign.pid}" in d.reason
    assert pid_alive(foreign.pid)  # looked at, never touched


def test_released_waits_for_the_stages_own_pids_only(tmp_path, foreign):
    path = tmp_path / "gpus.json"
    stage = subprocess.Popen([sys.executable, "-c", "pass"])
    stage.wait()  # the stage's process has exited; the driver still lists it for a moment
    write_gpus(path, [h100(0, [(foreign.pid, 40000), (stage.pid, 30000)])], free_dead_after_s=0.6)
    msgs = []
    gate = GpuGate(GpuGateSettings(release_wait_s=10), FakeProbe(path, inherited=None, use_env=False),
                   report=msgs.append)
    t0 = time.monotonic()
    gate.released(1, "train", [stage.pid])
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 3, waited
    assert any("released after" in m for m in msgs)
    # bounded: memory that never frees does not block forever, and nothing is signalled
    write_gpus(path, [h100(0, [(foreign.pid, 40000)])])
    gate.settings = GpuGateSettings(release_wait_s=0.5)
    t0 = time.monotonic()
    gate.released(1, "train", [foreign.pid])  # even if a foreign pid were named, it is only watched
    assert 0.4 <= time.monotonic() - t0 < 3
    assert any("still hold GPU memory" in m for m in msgs)
    assert pid_alive(foreign.pid)


# --- worker subprocesses ----------------------------------------------------------------------


def _gpu_ws(ws, path: Path, wait_minutes: float = 5, train: str | None = None, extra_gpus: str = ""):
    py = sys.executable
    train = train or (f"echo ORDER=$CUDA_DEVICE_ORDER CVD=$CUDA_VISIBLE_DEVICES GPUS={{gpus}} && "
                      f"{py} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}")
    text = default_config(train=train)
    text = text.replace("[gpus]\ndevices = []", f"[gpus]\ndevices = [0]\nmin_free_mib = 70000\n"
                                                 f"gpu_wait_minutes = {wait_minutes}\n{extra_gpus}")
    ws.write_config(text)
    ws.env["OPSDCTL_GPU_PROBE"] = f"fake:{path}"


def test_worker_waits_for_a_foreign_holder_reports_it_and_starts_once_released(ws, tmp_path, foreign):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(0, [(foreign.pid, 61000)])])
    _gpu_ws(ws, path)
    ws.cli("queue", "baseline")
    worker = ws.popen("worker", "--drain")
    try:
        st = wait_for(lambda: (lambda d: d if "waits" in (d["worker"].get("activity") or "") else None)(ws.status()),
                      timeout=30, what="the worker waiting for GPU 0")
        assert f"pid {foreign.pid}" in st["worker"]["activity"] and "61000 MiB" in st["worker"]["activity"]
        holders = st["gpus"]["gpus"][0]["processes"]
        assert [(p["pid"], p["used_mib"]) for p in holders] == [(foreign.pid, 61000)]
        assert holders[0]["name"].startswith("python")
        assert st["gpus"]["ready"] is False and f"pid {foreign.pid}" in st["gpus"]["blocked"]
        gp = ws.cli_json("gpus")
        assert gp["probe"] == "fake" and gp["gpus"][0]["index_cuda"] == 0
        assert gp["gpus"][0]["processes"][0]["pid"] == foreign.pid
        assert "61000" in ws.cli("gpus").stdout
        time.sleep(1.0)
        assert ws.state(1) == "running" and ws.sql("select count(*) from stage")[0][0] == 0  # still waiting
        assert pid_alive(foreign.pid)
        write_gpus(path, [h100(0)])  # the foreign process frees the GPU (it keeps running)
        out, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, out
    assert ws.state(1) == "succeeded"
    assert "GPUs ready for train after waiting" in out
    log = (ws.runs / "1" / "train.log").read_text()
    assert "ORDER=PCI_BUS_ID CVD=0 GPUS=0" in log
    assert pid_alive(foreign.pid)


def test_worker_skips_after_gpu_wait_minutes_naming_the_holder(ws, tmp_path, foreign):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(0, [(foreign.pid, 61000)])])
    _gpu_ws(ws, path, wait_minutes=0.02)
    ws.cli("queue", "baseline")
    res = ws.run("worker", "--drain")
    state, reason = ws.sql("select state, reason from chain where id = 1")[0]
    assert state == "skipped", res.stdout
    assert "train: GPUs not ready after" in reason and f"pid {foreign.pid}" in reason and "(61000 MiB)" in reason
    assert ws.status()["chains"][0]["reason"] == reason
    assert pid_alive(foreign.pid)
    os.kill(foreign.pid, 0)  # still ours to kill (the fixture does), opsdctl never signalled it


def test_worker_waits_for_its_own_stage_memory_before_the_next_stage(ws, tmp_path):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(0)], free_dead_after_s=1.5)
    py = sys.executable
    train = (f"{py} {GPU_USER} {path} --pid $$ --mib 30000 && "
             f"{py} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}")
    _gpu_ws(ws, path, train=train)
    ws.cli("queue", "baseline")
    res = ws.run("worker", "--drain")
    assert ws.state(1) == "succeeded", res.stdout
    assert "train's GPU memory released after" in res.stdout
    import datetime as dt

    rows = {name: (started, secs) for name, started, secs in
            ws.sql("select name, started_at, seconds from stage where chain_id = 1")}
    t_start = dt.datetime.fromisoformat(rows["train"][0])
    e_start = dt.datetime.fromisoformat(rows["eval"][0])
    gap = (e_start - t_start).total_seconds() - rows["train"][1]
    assert gap >= 1.3, gap  # the eval waited for the train stage's memory


def test_devices_named_without_nvml_runs_ungated_with_a_clear_line(ws, tmp_path):
    path = tmp_path / "gpus.json"
    write_gpus(path, [], unavailable="NVML Shared Library Not Found")
    _gpu_ws(ws, path)
    ws.cli("queue", "baseline")
    res = ws.run("worker", "--drain")
    assert "[gpus] devices = [0] but NVML Shared Library Not Found: no GPU gate" in res.stdout.replace("\n", " ")
    assert ws.state(1) == "succeeded"
    assert "CVD=0 GPUS=0" in (ws.runs / "1" / "train.log").read_text()
    out = ws.cli("gpus").stdout
    assert "no GPU inventory" in out and "no GPU gate" in out
    assert ws.status()["gpus"]["gate"] == "off"


def test_no_devices_no_gate_no_probe(ws):
    doc = ws.status()
    assert doc["gpus"] == {"gate": "off", "devices": [], "gpus": [], "note": "devices = []: no GPUs, no gate"}
