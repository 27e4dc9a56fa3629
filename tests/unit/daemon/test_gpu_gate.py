"""The GPU gate's pure pieces (opsdctl.daemon.gpu_probe, opsdctl.daemon.gpu_gate) with the NVML
stand-in (FakeProbe) behind the same interface: CUDA index order, the check naming missing GPUs
and holders, NVML without a driver, an inherited UUID list."""

from __future__ import annotations

import pytest
from support.gpus import h100, write_gpus

from opsdctl.daemon.gpu_gate import GpuGate, GpuGateSettings
from opsdctl.daemon.gpu_probe import (
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


def test_gate_keeps_an_inherited_uuid_list(tmp_path):
    path = tmp_path / "gpus.json"
    write_gpus(path, [h100(0, bus="0000:b3:00.0"), h100(1, bus="0000:17:00.0"), h100(2, bus="0000:65:00.0")])
    probe = FakeProbe(path, inherited="GPU-0000-fake,GPU-0002-fake", use_env=False)
    inv = {g.index_nvml: g for g in probe.inventory()}
    assert (inv[0].index_cuda, inv[2].index_cuda, inv[1].index_cuda) == (0, 1, None)
    gate = GpuGate(GpuGateSettings(min_free_mib=1000), probe)
    g = gate.check(1, "train", (1,))
    assert g.gpus == (1,) and g.visible == "GPU-0002-fake"
