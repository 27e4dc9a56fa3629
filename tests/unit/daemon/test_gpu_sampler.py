"""The stage GPU sampler (opsdctl.daemon.gpu_sampler) on the FakeProbe stand-in: device memory minus
the start when NVML lists no process, and no sampler without GPUs or NVML."""

from __future__ import annotations

import json
import os

from support.gpus import gpu_file, set_gpu

from opsdctl.daemon.gpu_probe import FakeProbe
from opsdctl.daemon.gpu_sampler import GpuSampler, sampler_for_stage


def test_sampler_falls_back_to_device_memory_minus_the_start(tmp_path):
    f = gpu_file(tmp_path / "gpus.json", base_used=5000)
    s = GpuSampler(FakeProbe(f, inherited=None, use_env=False), [0, 1], lambda: {os.getpid()}, 0.1)
    s.sample()
    set_gpu(f, 0, base_used_mib=5000 + 3000)  # NVML lists no process (a container): only the device grows
    set_gpu(f, 1, base_used_mib=1200)
    s.sample()
    u = s.usage()
    assert u.attribution == "device" and u.peak_mib == 3000 and [g["peak_mib"] for g in u.per_gpu] == [3000, 1200]


def test_no_sampler_without_gpus_or_nvml(tmp_path):
    f = gpu_file(tmp_path / "gpus.json")
    probe = FakeProbe(f, inherited=None, use_env=False)
    assert sampler_for_stage([], set, 1.0, probe) is None  # no GPUs granted
    assert sampler_for_stage([0], set, 0.0, probe) is None  # [gpus] sample_seconds = 0
    f.write_text(json.dumps({"unavailable": "no NVIDIA driver"}))
    assert sampler_for_stage([0], set, 1.0, probe) is None  # a CPU machine
    gone = GpuSampler(probe, [0], set, 0.1).start()
    assert gone.stop() is None  # every sample failed: no figure, no error
