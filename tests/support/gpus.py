"""GPU stand-ins for tests: FakeProbe files, their GPUs and processes, and the planner's inputs
without a store. NVML cannot exist on a CPU machine; the fake sits behind the probe's interface."""

from __future__ import annotations

import json
import os
from pathlib import Path

from opsdctl.plan import facts
from opsdctl.plan.gate import ChainInfo


def write_gpus(path: Path, gpus: list[dict], **extra) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpus": gpus, **extra}))
    os.replace(tmp, path)


def h100(i: int, procs=(), bus: str | None = None) -> dict:
    return {"uuid": f"GPU-{i:04d}-fake", "name": "Fake H100 80GB", "pci_bus_id": bus or f"00000000:{0x10 + i:02x}:00.0",
            "total_mib": 81559, "processes": [{"pid": p, "used_mib": m} for p, m in procs]}


def gpu_file(path, foreign_pid=None, base_used=0):
    gpus = [{"uuid": f"GPU-fake-{i}", "total_mib": 81559, "base_used_mib": base_used if i == 0 else 0,
             "util_pct": 0, "processes": []} for i in range(2)]
    if foreign_pid is not None:  # someone else's process on the stage's GPU, and on the other one
        gpus[0]["processes"].append({"pid": foreign_pid, "used_mib": 20000, "name": "sleep"})
        gpus[1]["processes"].append({"pid": foreign_pid, "used_mib": 50000, "name": "sleep"})
        gpus[1]["util_pct"] = 100
    path.write_text(json.dumps({"gpus": gpus}))
    return path


def set_gpu(path, gpu, **kw):
    doc = json.loads(path.read_text())
    doc["gpus"][gpu].update(kw)
    path.write_text(json.dumps(doc))


def chain_info_stub(chain_id=1, variant="baseline") -> ChainInfo:
    return ChainInfo(chain_id, variant, 1, variant, 1, "h", 0, 0, 0, "qwen3-1.7b", {}, {})


class NoFacts(facts.NoFacts):
    """No store, baseline "baseline"."""

    def __init__(self):
        super().__init__("baseline")
