"""Peak GPU memory and mean utilisation of a stage, sampled by the worker with NVML, whatever the
script (our trainer, a user's `train_capped.sh`, an evaluator).

A background thread asks the probe (opsdctl.daemon.gpu_probe: NVML, or the FakeProbe stand-in on CPU
machines) every `[gpus] sample_seconds` and looks only at the stage's granted GPUs:

- memory, attributed to the stage's own processes (its leader and their descendants) when
  NVML lists them with their memory; where it lists none of them (a container whose pids NVML
  cannot show, a driver that reports no per-process memory), the device's used memory minus what
  it held when the stage started. The figure says which (`attribution`);
- utilisation: NVML's per-device figure (no per-process one exists that every driver gives),
  averaged over the samples and the granted GPUs.

Why the worker and not the script: `torch.cuda.memory_allocated()` inside a trainer counts only
its own allocator (and vLLM's sleeping pool as if it were live); NVML sees what the GPU holds.
A sample that fails (NVML gone, the fake file mid-rewrite) is skipped; a stage without granted
GPUs, or a machine without NVML, gets no figure (None), never an error.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from opsdctl.daemon.gpu_probe import GpuInfo, GpuProbe, ProbeUnavailable, probe_from_env

DEFAULT_INTERVAL_S = 1.0


@dataclass
class _PerGpu:
    gpu: int  # CUDA index
    baseline_mib: Optional[int] = None  # device memory used at the stage's start
    peak_mib: float = 0.0
    util: list[float] = field(default_factory=list)


@dataclass
class GpuUsage:
    peak_mib: Optional[float]  # the largest memory the stage held on one of its GPUs
    util_pct: Optional[float]  # mean device utilisation over its GPUs and the samples
    samples: int
    attribution: str  # "processes" (NVML listed the stage's own) | "device" (used minus at start)
    interval_s: float
    per_gpu: list[dict]  # {"gpu", "peak_mib", "util_pct"}

    def to_json(self) -> dict:
        return asdict(self)


class GpuSampler:
    def __init__(self, probe: GpuProbe, gpus: Sequence[int], pids: Callable[[], set[int]],
                 interval_s: float = DEFAULT_INTERVAL_S):
        self.probe = probe
        self.gpus = {g: _PerGpu(g) for g in gpus}
        self.pids = pids
        self.interval_s = interval_s
        self.samples = 0
        self.by_process = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # --- one sample (the thread calls this; tests call it directly) ------------------------

    def sample(self) -> bool:
        try:
            inventory = self.probe.inventory()
        except (ProbeUnavailable, OSError, ValueError):
            return False
        mine = self.pids()
        by_cuda: dict[int, GpuInfo] = {g.index_cuda: g for g in inventory if g.index_cuda is not None}
        seen = False
        for idx, acc in self.gpus.items():
            g = by_cuda.get(idx)
            if g is None:
                continue
            seen = True
            if acc.baseline_mib is None:
                acc.baseline_mib = g.used_mib
            ours = [p for p in g.processes if p.pid in mine and p.used_mib is not None]
            if ours:
                self.by_process = True
                held = float(sum(p.used_mib for p in ours))
            else:
                held = float(max(0, g.used_mib - acc.baseline_mib))
            acc.peak_mib = max(acc.peak_mib, held)
            if g.util_pct is not None:
                acc.util.append(float(g.util_pct))
        if seen:
            self.samples += 1
        return seen

    def usage(self) -> Optional[GpuUsage]:
        if not self.samples:
            return None
        per = [acc for acc in self.gpus.values() if acc.baseline_mib is not None]
        utils = [u for acc in per for u in acc.util]
        return GpuUsage(
            peak_mib=max(acc.peak_mib for acc in per),
            util_pct=round(sum(utils) / len(utils), 1) if utils else None,
            samples=self.samples,
            attribution="processes" if self.by_process else "device",
            interval_s=self.interval_s,
            per_gpu=[{"gpu": acc.gpu, "peak_mib": acc.peak_mib,
                      "util_pct": round(sum(acc.util) / len(acc.util), 1) if acc.util else None} for acc in per],
        )

    # --- the thread ------------------------------------------------------------------------

    def start(self) -> "GpuSampler":
        self._thread = threading.Thread(target=self._run, name="opsdctl-gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> Optional[GpuUsage]:
        """Stop sampling and return the figures (None: not one sample)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
        return self.usage()


def sampler_for_stage(gpus: Sequence[int], pids: Callable[[], set[int]], interval_s: float,
                      probe: Optional[GpuProbe] = None) -> Optional[GpuSampler]:
    """A started sampler for a stage's granted GPUs; None when there is nothing to sample (no
    GPUs granted, sampling off, or no NVML on this machine)."""
    if not gpus or interval_s <= 0:
        return None
    probe = probe if probe is not None else probe_from_env()
    try:
        probe.inventory()
    except Exception:  # no NVML here (a CPU machine), or the fake file is missing
        return None
    return GpuSampler(probe, gpus, pids, interval_s).start()
