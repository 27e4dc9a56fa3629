"""The trainer's GPU memory figure, read from NVML: what the GPU really holds for this process.

`torch.cuda.max_memory_allocated()` cannot measure a colocated run: vLLM's sleeping pool lives
in torch's allocator accounting (it read 84 GiB on an H200 that held 1.3 GiB after sleep), and
it misses the CUDA context and anything outside torch. So a thread samples NVML (through
opsdctl's GPU probe: nvidia-ml-py, or its JSON stand-in on CPU machines via
OPSDCTL_GPU_PROBE=fake:FILE) and keeps the peak of this process's used memory on its GPU;
`take()` reads and restarts the peak, so a step can report its rollout and training phases
apart. Where NVML lists no per-process figure for us (a container's pid namespace), the GPU's
whole used memory stands in, and `source` says so.

On the CPU the figure is the process's peak resident set size, as before.
"""

from __future__ import annotations

import os
import resource
import threading
from typing import Optional

SAMPLE_EVERY_S = 0.1


class RssPeak:
    """CPU runs: peak resident set size of the process (MiB; Linux reports KiB)."""

    source = "rss"

    def take(self) -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def close(self) -> None:
        pass


class NvmlPeak:
    """Peak GPU memory (MiB) of process `pid` on CUDA device `cuda_index`, sampled from NVML."""

    def __init__(self, cuda_index: int, pid: Optional[int] = None, probe=None, every_s: float = SAMPLE_EVERY_S,
                 uuid: Optional[str] = None):
        from opsdctl.daemon.gpu_probe import probe_from_env

        self.cuda_index = cuda_index
        self.uuid = uuid.removeprefix("GPU-") if uuid else None  # CUDA's own id: right whatever the device order
        self.pid = os.getpid() if pid is None else pid
        self.probe = probe or probe_from_env()
        self.every_s = every_s
        self.source = "nvml"
        self.samples = 0
        self._peak = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sample()  # fail here, not in the thread, when NVML is unusable
        self._thread = threading.Thread(target=self._loop, name="nvml-memory", daemon=True)
        self._thread.start()

    def read_mib(self) -> float:
        """This process's used MiB on its GPU now (the GPU's used MiB if NVML lists no figure for us)."""
        gpus = self.probe.inventory()
        gpu = next((g for g in gpus if self.uuid and g.uuid.removeprefix("GPU-") == self.uuid), None)
        if gpu is None:
            gpu = next((g for g in gpus if g.index_cuda == self.cuda_index), None)
        if gpu is None:
            raise RuntimeError(f"NVML sees no GPU at CUDA index {self.cuda_index}")
        mine = [p.used_mib for p in gpu.processes if p.pid == self.pid and p.used_mib is not None]
        if mine:
            self.source = "nvml-process"
            return float(sum(mine))
        self.source = "nvml-device"
        return float(gpu.used_mib)

    def sample(self) -> float:
        mib = self.read_mib()
        with self._lock:
            self._peak = max(self._peak, mib)
            self.samples += 1
        return mib

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.sample()
            except Exception:  # a transient NVML error must not kill training; take() samples again
                continue

    def take(self) -> float:
        """The peak since the last take() (one fresh sample included), then start a new window."""
        try:
            now = self.read_mib()
        except Exception:
            now = 0.0
        with self._lock:
            peak, self._peak = max(self._peak, now), now
        return peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self.every_s + 1)


def memory_meter(device, log=print):
    """NvmlPeak for a CUDA device (RssPeak if NVML is unusable there, said once), RssPeak on the CPU."""
    if getattr(device, "type", str(device)) != "cuda":
        return RssPeak()
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "") or None
    except Exception:
        uuid = None  # match by CUDA index (opsdctl's stages run with CUDA_DEVICE_ORDER=PCI_BUS_ID)
    try:
        return NvmlPeak(index, uuid=uuid)
    except Exception as exc:
        log(f"warning: NVML is not usable here ({type(exc).__name__}: {exc}); peak memory is the process's RSS")
        return RssPeak()
