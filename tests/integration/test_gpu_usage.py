"""Peak GPU memory and mean utilisation of every stage, sampled by the worker with NVML whatever
the script. NVML cannot exist on this CPU machine, so the FakeProbe stand-in
(opsdctl.daemon.gpu_probe, the same interface) answers from a JSON file that the stage emulators
update as they "use" a GPU; the worker, its stages and the store are real."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.gpus import gpu_file, set_gpu

from opsdctl.daemon.gpu_probe import FakeProbe
from opsdctl.daemon.gpu_sampler import GpuSampler


@pytest.fixture
def foreign():
    p = subprocess.Popen(["sleep", "120"])
    yield p.pid
    p.kill()
    p.wait()


def test_sampler_counts_only_the_stage_processes_on_its_gpus(tmp_path, foreign):
    f = gpu_file(tmp_path / "gpus.json", foreign)
    me = os.getpid()
    s = GpuSampler(FakeProbe(f, inherited=None, use_env=False), [0], lambda: {me}, 0.1)
    assert s.sample()  # the baseline: nothing of ours yet
    for mib, util in ((4000, 50), (9000, 90), (2000, 70)):
        set_gpu(f, 0, processes=[{"pid": foreign, "used_mib": 20000}, {"pid": me, "used_mib": mib}], util_pct=util)
        s.sample()
    u = s.usage()
    assert u.peak_mib == 9000 and u.attribution == "processes" and u.samples == 4
    assert u.util_pct == pytest.approx((0 + 50 + 90 + 70) / 4)  # GPU 1's 100% is not the stage's
    assert u.per_gpu == [{"gpu": 0, "peak_mib": 9000.0, "util_pct": u.util_pct}]


def _workspace(ws, f, extra_env):
    text = (ws.root / "opsdctl.toml").read_text()
    text = text.replace("[gpus]\ndevices = []", "[gpus]\ndevices = [0]\nmin_free_mib = 0\nsample_seconds = 0.1")
    ws.write_config(text)
    ws.env.update({"OPSDCTL_GPU_PROBE": f"fake:{f}", "FAKE_GPU_FILE": str(f), **extra_env})


def test_worker_records_each_stage_gpu_peak_and_utilisation(ws, tmp_path, foreign):
    f = gpu_file(tmp_path / "gpus.json", foreign)
    _workspace(ws, f, {"FAKE_GPU_MIB": "3000", "FAKE_EVAL_GPU_MIB": "700", "FAKE_GPU_UTIL": "80",
                       "FAKE_STEPS": "4", "FAKE_STEP_SECONDS": "0.4", "FAKE_EVAL_SECONDS": "0.2",
                       "FAKE_NO_FILES": "1"})  # a user's script: it reports no memory of its own
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    rows = dict((name, (peak, util, json.loads(gpu))) for name, peak, util, gpu in ws.sql(
        "select name, gpu_peak_mib, gpu_util_pct, gpu from stage where chain_id = 1"))
    peak, util, detail = rows["train"]
    assert peak == 3000  # the foreign 20000 MiB on the same GPU is not the stage's
    assert 40 <= util <= 80 and detail["attribution"] == "processes" and detail["samples"] >= 3
    assert rows["eval"][0] == 700 and rows["eval"][2]["per_gpu"][0]["gpu"] == 0
    show = ws.cli_json("show", "baseline")["runs"][0]
    assert show["gpu"]["train"]["peak_mib"] == 3000 and show["gpu"]["eval"]["peak_mib"] == 700
    assert show["train"]["peak_mem_mib"] is None  # what the script said: nothing
    table = ws.cli("show", "baseline").stdout
    assert "train GPU peak/util" in table and "eval GPU peak/util" in table and "3000 MiB" in table
    stages = {st["name"]: st for st in ws.status()["chains"][0]["stages"]}
    assert stages["train"]["gpu_peak_mib"] == 3000
    compare = ws.cli("compare", "--explain").stdout
    assert "GPU peak MiB" in compare and "3000" in compare[compare.index("Training"):]


def test_device_attribution_when_nvml_lists_no_process(ws, tmp_path):
    f = gpu_file(tmp_path / "gpus.json", base_used=5000)  # 5 GB held before the stage started
    _workspace(ws, f, {"FAKE_GPU_MIB": "2000", "FAKE_GPU_AS": "device", "FAKE_STEP_SECONDS": "0.4"})
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    peak, gpu = ws.sql("select gpu_peak_mib, gpu from stage where chain_id = 1 and name = 'train'")[0]
    assert peak == 2000 and json.loads(gpu)["attribution"] == "device"
    table = ws.cli("show", "baseline").stdout
    assert "2000 MiB*" in table and "minus what it held when the stage started" in table


def test_stages_without_gpus_get_no_figures(ws):
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    assert ws.sql("select gpu_peak_mib, gpu_util_pct, gpu from stage") == [(None, None, None)] * 2
    assert "GPU peak" not in ws.cli("show", "baseline").stdout
