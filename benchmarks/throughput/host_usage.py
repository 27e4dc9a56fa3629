"""Host RAM and CPU of benchmark processes and their descendants, and the GPU's memory, sampled
from the parent (psutil, NVML) so a child's own measurements are untouched.

RSS summed over a process tree counts shared pages (the CUDA and torch libraries every process
maps) once per process; PSS shares them out, so PSS summed over several chains' trees is what
they take from the host together. CPU is the processes' user + system seconds over wall seconds:
the cores they keep busy. A process seen once keeps its last CPU reading after it exits.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class Series:
    """One root's tree over time: (t, rss MiB, pss MiB or None, cpu seconds so far, processes)."""

    t: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    pss_mib: list[float | None] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    procs: list[int] = field(default_factory=list)

    def summary(self, start: float | None = None, end: float | None = None) -> dict:
        """Peaks and mean cores over [start, end] (the whole series by default)."""
        idx = [i for i, t in enumerate(self.t) if (start is None or t >= start) and (end is None or t <= end)]
        if not idx:
            return {"samples": 0}
        pss = [self.pss_mib[i] for i in idx if self.pss_mib[i] is not None]
        cores = None
        if len(idx) >= 2 and self.t[idx[-1]] > self.t[idx[0]]:
            cores = (self.cpu_s[idx[-1]] - self.cpu_s[idx[0]]) / (self.t[idx[-1]] - self.t[idx[0]])
        steps = [(self.cpu_s[i + 1] - self.cpu_s[i]) / (self.t[i + 1] - self.t[i])
                 for i in idx[:-1] if self.t[i + 1] > self.t[i]]
        return {"samples": len(idx), "peak_rss_mib": round(max(self.rss_mib[i] for i in idx)),
                "peak_pss_mib": round(max(pss)) if pss else None,
                "mean_cores": round(cores, 2) if cores is not None else None,
                "peak_cores": round(max(steps), 2) if steps else None,
                "max_processes": max(self.procs[i] for i in idx)}

    def to_json(self) -> dict:
        return {"t": [round(x, 2) for x in self.t], "rss_mib": [round(x) for x in self.rss_mib],
                "pss_mib": [None if x is None else round(x) for x in self.pss_mib],
                "cpu_s": [round(x, 2) for x in self.cpu_s], "procs": self.procs}


class TreeSampler(threading.Thread):
    """Every `period` s: each watched root's tree (RSS, PSS, CPU), and the GPUs' used memory with
    NVML's per-process figures where it gives them."""

    def __init__(self, period: float = 1.0, pss: bool = True):
        super().__init__(daemon=True, name="tree-sampler")
        self.period, self.pss = period, pss
        self.roots: dict[str, int] = {}
        self.series: dict[str, Series] = {}
        self._cpu: dict[str, dict[int, float]] = {}
        self.gpu_used_mib: list[tuple[float, float]] = []  # (t, MiB used on all GPUs together)
        self.gpu_proc_peak_mib: dict[int, float] = {}
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._nvml = None

    def watch(self, name: str, pid: int) -> None:
        with self._lock:
            self.roots[name] = pid
            self.series.setdefault(name, Series())
            self._cpu.setdefault(name, {})

    def _tree(self, pid: int):
        import psutil

        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample_once(self) -> None:
        import psutil

        now = time.time()
        with self._lock:
            roots = dict(self.roots)
        for name, pid in roots.items():
            rss = 0.0
            pss: float | None = 0.0 if self.pss else None
            procs = self._tree(pid)
            cpu = self._cpu[name]
            for p in procs:
                try:
                    with p.oneshot():
                        times = p.cpu_times()
                        cpu[p.pid] = times.user + times.system
                        info = None
                        if pss is not None:
                            try:
                                info = p.memory_full_info()
                            except psutil.AccessDenied:  # smaps unreadable: RSS alone from here on
                                pss = None
                        if info is not None:
                            rss += info.rss / 2**20
                            pss += getattr(info, "pss", 0.0) / 2**20
                        else:
                            rss += p.memory_info().rss / 2**20
                except psutil.Error:
                    continue
            if not procs and not self.series[name].t:
                continue
            s = self.series[name]
            s.t.append(now)
            s.rss_mib.append(rss)
            s.pss_mib.append(pss)
            s.cpu_s.append(sum(cpu.values()))
            s.procs.append(len(procs))
        self._sample_gpu(now)

    def _sample_gpu(self, now: float) -> None:
        try:
            import pynvml

            if self._nvml is None:
                pynvml.nvmlInit()
                self._nvml = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            used = 0.0
            for h in self._nvml:
                used += pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if p.usedGpuMemory:
                        mib = p.usedGpuMemory / 2**20
                        self.gpu_proc_peak_mib[p.pid] = max(self.gpu_proc_peak_mib.get(p.pid, 0.0), mib)
            self.gpu_used_mib.append((now, used))
        except Exception:
            self._nvml = self._nvml or []  # no NVML here (the CPU): stop trying

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample_once()
            self._halt.wait(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)
        self.sample_once()

    def gpu_summary(self, pids: dict[str, int]) -> dict:
        """Peak GPU memory used (all processes), and each named process's NVML peak where listed."""
        peak = max((u for _, u in self.gpu_used_mib), default=None)
        return {"peak_gpu_used_mib": round(peak) if peak is not None else None,
                "per_process_peak_mib": {name: (round(self.gpu_proc_peak_mib[pid])
                                                if pid in self.gpu_proc_peak_mib else None)
                                         for name, pid in pids.items()}}


def host_facts() -> dict:
    import os

    import psutil

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = psutil.cpu_count()
    return {"ram_mib": round(psutil.virtual_memory().total / 2**20), "cpus": cpus,
            "cpu_count_logical": psutil.cpu_count()}
