"""The NVML gate of a stage's own GPUs: before it starts, each has min_free_mib free (waiting for
foreign holders up to gpu_wait_minutes, then the chain is skipped with the holders named); after
it ends, its own processes have freed their memory there (waiting up to release_wait_minutes).

It looks only at the GPUs the pool handed the stage (opsdctl.daemon.gpu_pool), so one slot's
busy GPUs never hold up another's stage. It reads through a probe (opsdctl.daemon.gpu_probe:
NVML, or the FakeProbe file of `OPSDCTL_GPU_PROBE=fake:...`) and never signals a process. A
machine without NVML runs its stages ungated, said once at start-up.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from opsdctl.daemon.gpu_probe import ProbeUnavailable, check_gpus, own_holdings, probe_from_env
from opsdctl.plan.gate import Grant, Skip, Wait

RELEASE_POLL_S = 0.25
ORDER_ENV = (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),)  # {gpus} and CUDA_VISIBLE_DEVICES mean NVML's cards


@dataclass(frozen=True)
class GpuGateSettings:
    min_free_mib: int = 0
    wait_s: float = 30 * 60.0  # [gpus] gpu_wait_minutes
    release_wait_s: float = 3 * 60.0  # [gpus] release_wait_minutes
    poll_s: float = 2.0


def settings_from_config(cfg) -> GpuGateSettings:
    gp = cfg.section("gpus")
    return GpuGateSettings(
        min_free_mib=cfg.min_free_mib,
        wait_s=float(gp.get("gpu_wait_minutes") or 30.0) * 60.0,
        release_wait_s=float(gp.get("release_wait_minutes") or 3.0) * 60.0,
        poll_s=min(cfg.poll_seconds, 5.0),
    )


class GpuGate:
    """One per worker; `check` and `released` are called from every chain's thread."""

    def __init__(self, settings: GpuGateSettings, probe=None, report: Callable[[str], None] = lambda m: None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        self.probe = probe  # None: no gate (no GPUs, or no NVML here)
        self.report = report
        self.clock, self.sleep = clock, sleep
        self._lock = threading.Lock()
        self._waits: dict[tuple[int, str], float] = {}  # (chain, stage) -> when it began to wait
        self._warned = False

    def _inventory(self):
        with self._lock:  # the fake probe keeps state between reads
            return self.probe.inventory()

    def check(self, chain_id: int, stage: str, gpus: Sequence[int]):
        """Grant(gpus) when each has min_free_mib free; Wait while a holder keeps them, up to
        the wait bound; then Skip naming the holders."""
        s = self.settings
        if self.probe is None:
            return Grant(tuple(gpus), env=ORDER_ENV)
        try:
            inv = self._inventory()
        except ProbeUnavailable as exc:
            if not self._warned:
                self._warned = True
                self.report(f"GPU check unavailable ({exc}); granting {list(gpus)} without it")
            return Grant(tuple(gpus), env=ORDER_ENV)
        check = check_gpus(inv, gpus, s.min_free_mib)
        key = (chain_id, stage)
        if not check.ok:
            with self._lock:
                first = self._waits.setdefault(key, self.clock())
            waited = self.clock() - first
            if waited >= s.wait_s:
                self.forget(chain_id, stage)
                return Skip(f"GPUs not ready after {waited / 60:.1f} min ([gpus] gpu_wait_minutes): {check.reason}")
            return Wait(max(0.05, min(s.poll_s, s.wait_s - waited)), check.reason)
        with self._lock:
            began = self._waits.pop(key, None)
        if began is not None:
            self.report(f"chain {chain_id}: GPUs ready for {stage} after waiting {self.clock() - began:.0f}s")
        tokens = {g.index_cuda: g.visible_as for g in inv if g.index_cuda is not None}
        visible = None
        if all(tokens.get(d) for d in gpus):  # an inherited CUDA_VISIBLE_DEVICES: keep its spelling
            visible = ",".join(tokens[d] for d in gpus)
        return Grant(tuple(gpus), env=ORDER_ENV, visible=visible)

    def forget(self, chain_id: int, stage: str) -> None:
        """The stage no longer waits (it was skipped, cancelled or stopped)."""
        with self._lock:
            self._waits.pop((chain_id, stage), None)

    def released(self, chain_id: int, stage: str, pids: Sequence[int]) -> None:
        """Return once the stage's own processes hold no GPU memory (bounded; nothing signalled)."""
        s = self.settings
        if self.probe is None or not pids:
            return
        start = self.clock()
        while True:
            try:
                held = own_holdings(self._inventory(), pids)
            except ProbeUnavailable:
                return
            waited = self.clock() - start
            if not held:
                if waited >= 0.5:
                    self.report(f"chain {chain_id}: {stage}'s GPU memory released after {waited:.1f}s")
                return
            if waited >= s.release_wait_s:
                what = ", ".join(f"pid {p.pid} {p.used_mib} MiB on GPU {i}" for i, p in held)
                self.report(f"chain {chain_id}: {stage}'s processes still hold GPU memory after "
                            f"{waited:.0f}s ({what}); going on (the next stage's GPU check waits for free memory)")
                return
            self.sleep(RELEASE_POLL_S)


def make_gpu_gate(cfg, devices: Sequence[int], report: Callable[[str], None], probe=None) -> GpuGate:
    """The worker's gate over `devices`: the probe from the environment (NVML unless
    OPSDCTL_GPU_PROBE says fake); without NVML, stages run ungated, said once here."""
    settings = settings_from_config(cfg)
    if not devices:
        return GpuGate(settings, None, report)
    probe = probe if probe is not None else probe_from_env()
    try:
        probe.inventory()
    except ProbeUnavailable as exc:
        report(f"[gpus] devices = {list(devices)} but {exc}: no GPU gate; stages get "
               f"CUDA_VISIBLE_DEVICES={','.join(map(str, devices))} without any check")
        probe = None
    return GpuGate(settings, probe, report)
