"""The GPU gate (opsdctl.plan.gpus + PlannerGate.grant/released) with the NVML stand-in (FakeProbe)
behind the same interface: index mapping, the check, and real worker subprocesses that wait
for a GPU held by a foreign process, report the holder, never touch it, skip after
gpu_wait_minutes, and wait for a stage's own processes to free their memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FAKE_EVAL, FAKE_TRAIN, STAGES, default_config, pid_alive, wait_for

from opsdctl.plan.gate import ChainInfo, Grant, Skip, Wait
from opsdctl.plan.gpus import (
    FakeProbe,
    GpuInfo,
    GpuProcess,
    NvmlProbe,
    ProbeUnavailable,
    check_gpus,
    cuda_order,
    normalize_bus_id,
    own_holdings,
)
from opsdctl.plan.planner import PlannerGate, PlannerSettings

GPU_USER = STAGES / "fake_gpu_user.py"


def write_gpus(path: Path, gpus: list[dict], **extra) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": gpus, **extra}))
    os.replace(tmp, path)


def h100(i: int, procs=(), bus: str | None = None) -> dict:
    return {"uuid": f"GPU-{i:04d}-fake", "name": "Fake H100 80GB", "pci_bus_id": bus or f"00000000:{0x10 + i:02x}:00.0",
            "total_mib": 81559, "processes": [{"pid": p, "used_mib": m} for p, m in procs]}


@pytest.fixture
def foreign():
    """A process opsdctl did not start (its own session, like another user's job)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


# --- pure pieces ----------------------------------------------------------------------------


def test_cuda_order_by_pci_bus_and_inherited_visible_devices():
    devs = [(0, "GPU-bbbb", "0000:65:00.0"), (1, "GPU-aaaa", "00000000:17:00.0"), (2, "GPU-cccc", "0000:B3:00.0")]
    assert normalize_bus_id("0000:B3:00.0") == "00000000:b3:00.0"
    plain = cuda_order(devs, None)  # CUDA_DEVICE_ORDER=PCI_BUS_ID: rank by bus id
    assert {n: s.index_cuda for n, s in plain.items()} == {1: 0, 0: 1, 2: 2}
    assert {n: s.token for n, s in plain.items()} == {1: "0", 0: "1", 2: "2"}
    by_index = cuda_order(devs, "2,0")  # indices into the PCI order
    assert {n: (s.index_cuda, s.token) for n, s in by_index.items()} == {2: (0, "2"), 1: (1, "0")}
    by_uuid = cuda_order(devs, "GPU-cccc,GPU-bb")  # UUIDs and unique prefixes
    assert {n: (s.index_cuda, s.token) for n, s in by_uuid.items()} == {2: (0, "GPU-cccc"), 0: (1, "GPU-bb")}
    assert cuda_order(devs, "1,7,0") == {0: cuda_order(devs, "1")[0]}  # CUDA stops at the first bad entry
    assert cuda_order(devs, "") == {}


def test_check_names_missing_gpus_and_holders():
    held = GpuInfo(0, 0, "GPU-a", "H100", "x", 81559, 61500, 20059,
                   (GpuProcess(4242, "python", 61000), GpuProcess(77, "vllm", 500)))
    free = GpuInfo(1, 1, "GPU-b", "H100", "y", 81559, 300, 81259)
    ok = check_gpus([held, free], [1], 70000)
    assert ok.ok and ok.reason == ""
    bad = check_gpus([held, free], [0, 1, 3], 70000)
    assert not bad.ok
    assert bad.problems[0] == ("GPU 0: 20059 MiB free < 70000 needed; held by pid 4242 python (61000 MiB), "
                               "pid 77 vllm (500 MiB)")
    assert bad.problems[1] == "GPU 3 does not exist (CUDA sees 0, 1)"
    assert {h["pid"] for h in bad.holders} == {4242, 77}
    assert own_holdings([held, free], [77, 5]) == [(0, GpuProcess(77, "vllm", 500))]


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


def test_nvml_probe_without_a_driver_says_so():
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML")
    except Exception:
        pass
    with pytest.raises(ProbeUnavailable, match="NVML is not available"):
        NvmlProbe(use_env=False).inventory()


def _info(chain_id=1, variant="baseline") -> ChainInfo:
    return ChainInfo(chain_id, variant, 1, variant, 1, "h", 0, 0, 0, "qwen3-1.7b", {}, {})


class NoFacts:
    def runs(self):
        return []

    def samples(self):
        return []

    def baseline_label(self):
        return "baseline"

    def dropped(self):
        return {}

    def queue_repeat(self, v, why):
        return None

    def save_plan(self, doc):
        pass


def test_gate_waits_then_grants_then_skips_after_the_wait_bound(tmp_path, foreign):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(0, [(foreign.pid, 61000)]), h100(1)])
    now = [0.0]
    gate = PlannerGate(PlannerSettings(devices=(0, 1), gated=True, min_free_mib=70000, gpu_wait_s=60, poll_s=2),
                       NoFacts(), probe=FakeProbe(path, inherited=None, use_env=False), clock=lambda: now[0])
    d = gate.grant(_info(), "train")
    assert isinstance(d, Wait) and f"pid {foreign.pid}" in d.reason and "61000 MiB" in d.reason and d.seconds == 2
    now[0] = 30.0
    assert isinstance(gate.grant(_info(), "train"), Wait)
    write_gpus(path, [h100(0), h100(1)])  # the holder let go
    g = gate.grant(_info(), "train")
    assert isinstance(g, Grant) and g.gpus == (0, 1) and dict(g.env) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert g.visible is None and g.estimate_seconds == 19 * 60
    write_gpus(path, [h100(0, [(foreign.pid, 61000)]), h100(1)])
    assert isinstance(gate.grant(_info(), "eval"), Wait)
    now[0] = 91.0
    d = gate.grant(_info(), "eval")
    assert isinstance(d, Skip) and "gpu_wait_minutes" in d.reason and f"pid {foreign.pid}" in d.reason
    assert pid_alive(foreign.pid)  # looked at, never touched


def test_gate_keeps_an_inherited_uuid_list(tmp_path):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(0, bus="0000:b3:00.0"), h100(1, bus="0000:17:00.0"), h100(2, bus="0000:65:00.0")])
    probe = FakeProbe(path, inherited="GPU-0000-fake,GPU-0002-fake", use_env=False)
    inv = {g.index_nvml: g for g in probe.inventory()}
    assert (inv[0].index_cuda, inv[2].index_cuda, inv[1].index_cuda) == (0, 1, None)
    gate = PlannerGate(PlannerSettings(devices=(1,), gated=True, min_free_mib=1000), NoFacts(), probe=probe)
    g = gate.grant(_info(), "train")
    assert g.gpus == (1,) and g.visible == "GPU-0002-fake"


def test_released_waits_for_the_stages_own_pids_only(tmp_path, foreign):
    path = tmp_path / "gpus.json"
    stage = subprocess.Popen([sys.executable, "-c", "pass"])
    stage.wait()  # the stage's process has exited; the driver still lists it for a moment
    write_gpus(path, [h100(0, [(foreign.pid, 40000), (stage.pid, 30000)])], free_dead_after_s=0.6)
    msgs = []
    gate = PlannerGate(PlannerSettings(devices=(0,), gated=True, release_wait_s=10), NoFacts(),
                       probe=FakeProbe(path, inherited=None, use_env=False), report=msgs.append)
    t0 = time.monotonic()
    gate.released(_info(), "train", [stage.pid])
    waited = time.monotonic() - t0
    assert 0.5 <= waited < 3, waited
    assert any("released after" in m for m in msgs)
    # bounded: memory that never frees does not block forever, and nothing is signalled
    write_gpus(path, [h100(0, [(foreign.pid, 40000)])])
    gate.settings = PlannerSettings(devices=(0,), gated=True, release_wait_s=0.5)
    t0 = time.monotonic()
    gate.released(_info(), "train", [foreign.pid])  # even if a foreign pid were named, it is only watched
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
