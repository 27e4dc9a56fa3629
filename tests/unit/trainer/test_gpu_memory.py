"""The trainer's peak GPU memory comes from NVML for its own process, not from torch's counters
(which count vLLM's sleeping pool). NVML cannot exist here: opsdctl's JSON stand-in answers
behind the same probe interface."""

from __future__ import annotations

import json
import os
import time

import torch

from opsdctl.daemon.gpu_probe import FakeProbe
from trainer.gpu_memory import NvmlPeak, RssPeak, memory_meter


def write(path, mine=None, foreign=61000, base=500):
    procs = [{"pid": os.getppid(), "used_mib": foreign, "name": "python"}]
    if mine is not None:
        procs.append({"pid": os.getpid(), "used_mib": mine, "name": "python"})
    gpus = [{"uuid": "GPU-aaaa", "total_mib": 81559, "base_used_mib": base, "pci_bus_id": "00000000:17:00.0"},
            {"uuid": "GPU-bbbb", "total_mib": 81559, "base_used_mib": base, "pci_bus_id": "00000000:18:00.0",
             "processes": procs}]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": gpus}))
    os.replace(tmp, path)  # the sampler thread never reads a half-written file


def wait_samples(meter, more: int = 3, timeout: float = 10.0) -> None:
    want = meter.samples + more
    t0 = time.monotonic()
    while meter.samples < want:
        assert time.monotonic() - t0 < timeout, "the sampler thread does not sample"
        time.sleep(0.01)


def test_peak_is_this_process_on_its_gpu_per_window(tmp_path):
    path = tmp_path / "gpus.json"
    write(path, mine=5000)
    meter = NvmlPeak(1, probe=FakeProbe(path, inherited=None, use_env=False), every_s=0.01)
    try:
        write(path, mine=9000)  # e.g. vLLM awake for a rollout
        wait_samples(meter)
        write(path, mine=3000)  # asleep again, before the step reads its figure
        wait_samples(meter)
        assert meter.take() == 9000.0 and meter.source == "nvml-process"  # not the foreign 61000, not GPU 0
        assert meter.take() == 3000.0  # a new window starts at what the GPU holds now
    finally:
        meter.close()
    assert not meter._thread.is_alive()


def test_the_gpu_is_matched_by_uuid_before_index(tmp_path):
    path = tmp_path / "gpus.json"
    write(path, mine=4200)
    meter = NvmlPeak(0, uuid="bbbb", probe=FakeProbe(path, inherited=None, use_env=False), every_s=0.01)
    try:
        assert meter.take() == 4200.0  # CUDA index 0 here is GPU-bbbb, whatever NVML's order
    finally:
        meter.close()


def test_without_a_per_process_figure_the_gpu_used_memory_stands_in(tmp_path):
    path = tmp_path / "gpus.json"
    write(path, mine=None, foreign=7000, base=800)  # our pid unlisted (a container's pid namespace)
    meter = NvmlPeak(1, probe=FakeProbe(path, inherited=None, use_env=False), every_s=0.01)
    try:
        assert meter.take() == 7800.0 and meter.source == "nvml-device"
    finally:
        meter.close()


def test_meter_choice(tmp_path, monkeypatch):
    assert isinstance(memory_meter(torch.device("cpu")), RssPeak)
    path = tmp_path / "gpus.json"
    write(path, mine=1234)
    monkeypatch.setenv("OPSDCTL_GPU_PROBE", f"fake:{path}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # the stage's grant: CUDA 0 is the second GPU
    meter = memory_meter(torch.device("cuda", 0))
    try:
        assert isinstance(meter, NvmlPeak) and meter.take() == 1234.0
    finally:
        meter.close()
    monkeypatch.setenv("OPSDCTL_GPU_PROBE", f"fake:{tmp_path / 'missing.json'}")  # no NVML: said, and RSS
    said = []
    assert isinstance(memory_meter(torch.device("cuda", 0), said.append), RssPeak)
    assert said and "NVML is not usable" in said[0]
