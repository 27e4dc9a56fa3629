"""The GPU gate's eyes: which GPUs exist, how much memory is free, and who holds it.

One small interface, `GpuProbe.inventory() -> list[GpuInfo]`, with two implementations:

- `NvmlProbe`: NVIDIA's NVML through nvidia-ml-py (`import pynvml`, lazily: the control plane
  starts fast and never needs it on a CPU machine);
- `FakeProbe`: the same answers read from a JSON file, for CPU machines (tests, the simulator
  and `benchmarks/gpu_gate_check.py --fake`). The file is re-read on every call, so a test can
  rewrite it while a worker subprocess watches it. Select it with
  `OPSDCTL_GPU_PROBE=fake:/path/to/gpus.json`.

Indices. NVML numbers devices its own way; CUDA numbers them fastest-first unless
`CUDA_DEVICE_ORDER=PCI_BUS_ID`. opsdctl sets `CUDA_DEVICE_ORDER=PCI_BUS_ID` in every stage's
environment and maps NVML devices to CUDA indices by PCI bus id (sorted), so `[gpus] devices`,
`{gpus}` and `CUDA_VISIBLE_DEVICES` all mean the same cards. When the worker itself inherited
`CUDA_VISIBLE_DEVICES` (indices, or UUIDs such as `GPU-5a1c...`), CUDA index i is the i-th entry
of that list (CUDA's own rule, including "stop at the first entry that matches nothing"), and
the stage gets the inherited entries themselves (so a UUID list stays a UUID list).

This module only looks. Nothing here (or in the GPU gate that uses it, opsdctl.daemon.gpu_gate)
signals a process: a GPU held by a process opsdctl did not start is reported, waited for, and
left alone. The planner never probes: it is handed the devices (opsdctl.plan.slots.Layout).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Protocol, Sequence

from opsdctl.errors import UserError

ENV_PROBE = "OPSDCTL_GPU_PROBE"  # "nvml" (default) | "fake:/path/to/gpus.json"
MIB = 1024 * 1024


class ProbeUnavailable(RuntimeError):
    """No NVML here (no driver, no NVIDIA GPUs), or the fake file is missing."""


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str  # process name where visible ("?" when the pid is not in our namespace)
    used_mib: Optional[int]  # None when NVML does not say (some drivers / containers)
    visible: bool = True  # the pid exists in this pid namespace

    def text(self) -> str:
        mib = f"{self.used_mib} MiB" if self.used_mib is not None else "? MiB"
        return f"pid {self.pid} {self.name} ({mib})"


@dataclass(frozen=True)
class GpuInfo:
    index_nvml: int
    index_cuda: Optional[int]  # None: not visible to CUDA under the inherited CUDA_VISIBLE_DEVICES
    uuid: str
    name: str
    pci_bus_id: str
    total_mib: int
    used_mib: int
    free_mib: int
    processes: tuple[GpuProcess, ...] = ()
    visible_as: Optional[str] = None  # the CUDA_VISIBLE_DEVICES entry that selects it (inherited list)
    util_pct: Optional[int] = None  # NVML's GPU utilisation over its last sample period (None: not reported)

    def to_json(self) -> dict:
        d = asdict(self)
        d["processes"] = [asdict(p) for p in self.processes]
        return d

    def holders_text(self) -> str:
        procs = sorted(self.processes, key=lambda p: -(p.used_mib or 0))
        if not procs:
            return f"no visible process (used {self.used_mib} MiB)" if self.used_mib > 0 else "free"
        return ", ".join(p.text() for p in procs)


class GpuProbe(Protocol):
    kind: str

    def inventory(self) -> list[GpuInfo]: ...


# --- NVML index -> CUDA index -------------------------------------------------------------


def normalize_bus_id(bus_id: str) -> str:
    """'00000000:17:00.0' and '0000:17:00.0' -> '00000000:17:00.0' (lower case)."""
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    if rest and len(domain) < 8:
        domain = domain.rjust(8, "0")
    return f"{domain}:{rest}" if rest else bus_id


@dataclass(frozen=True)
class CudaSlot:
    index_cuda: int
    token: str  # the CUDA_VISIBLE_DEVICES entry for it ("3", "GPU-..."), as the stage gets it


def cuda_order(devices: Sequence[tuple[int, str, str]], inherited: Optional[str]) -> dict[int, CudaSlot]:
    """Map NVML indices to CUDA indices.

    devices: (index_nvml, uuid, pci_bus_id) for every device NVML sees.
    inherited: the worker's own CUDA_VISIBLE_DEVICES (None when unset).

    Without an inherited list, CUDA index = rank by PCI bus id (CUDA_DEVICE_ORDER=PCI_BUS_ID)
    and the token is that index. With one, each entry is an index into that PCI order or a
    (prefix of a) UUID; CUDA index = position in the list; CUDA ignores everything from the
    first entry that matches no device, and so do we. NVML indices missing from the result are
    invisible to the stages.
    """
    by_pci = sorted(devices, key=lambda d: normalize_bus_id(d[2]))
    if inherited is None:
        return {d[0]: CudaSlot(i, str(i)) for i, d in enumerate(by_pci)}
    out: dict[int, CudaSlot] = {}
    for entry in [e.strip() for e in inherited.split(",")]:
        match = None
        if entry.isdigit():
            i = int(entry)
            match = by_pci[i] if i < len(by_pci) else None
        elif entry.startswith("GPU-"):
            hits = [d for d in by_pci if d[1].startswith(entry)]
            match = hits[0] if len(hits) == 1 else None
        if match is None or match[0] in out:
            break  # CUDA stops at the first invalid (or repeated) entry
        out[match[0]] = CudaSlot(len(out), entry)
    return out


def inherited_visible_devices(env: Optional[dict] = None) -> Optional[str]:
    env = os.environ if env is None else env
    return env.get("CUDA_VISIBLE_DEVICES")


# --- process names ------------------------------------------------------------------------


def _proc_name(pid: int, fallback: str = "?") -> tuple[str, bool]:
    import psutil

    try:
        return psutil.Process(pid).name(), True
    except psutil.Error:
        return fallback, False


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --- NVML ---------------------------------------------------------------------------------


class NvmlProbe:
    """NVIDIA's NVML. Raises ProbeUnavailable when there is no driver or no library."""

    kind = "nvml"

    def __init__(self, inherited: Optional[str] = None, use_env: bool = True):
        self.inherited = inherited_visible_devices() if use_env and inherited is None else inherited

    def inventory(self) -> list[GpuInfo]:
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
            raise ProbeUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            raise ProbeUnavailable(f"NVML is not available here ({type(exc).__name__}: {exc})") from None
        try:
            raw = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(pynvml.nvmlDeviceGetUUID(h))
                name = _text(pynvml.nvmlDeviceGetName(h))
                bus = _text(pynvml.nvmlDeviceGetPciInfo(h).busId)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                try:
                    util = int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                except pynvml.NVMLError:  # not supported on some devices (MIG slices)
                    util = None
                procs: dict[int, Optional[int]] = {}
                for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                    try:
                        for p in getattr(pynvml, getter)(h):
                            used = getattr(p, "usedGpuMemory", None)
                            used = None if used is None or used < 0 or used >= 2**63 else int(used // MIB)
                            prev = procs.get(int(p.pid))
                            procs[int(p.pid)] = used if prev is None else prev + (used or 0)
                    except pynvml.NVMLError:
                        continue
                plist = []
                for pid, used in procs.items():
                    pname, visible = _proc_name(pid)
                    plist.append(GpuProcess(pid, pname, used, visible))
                raw.append((i, uuid, name, bus, int(mem.total // MIB), int(mem.used // MIB), int(mem.free // MIB),
                            tuple(plist), util))
        finally:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass
        slots = cuda_order([(r[0], r[1], r[3]) for r in raw], self.inherited)
        return [
            GpuInfo(r[0], slots[r[0]].index_cuda if r[0] in slots else None, r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                    slots[r[0]].token if r[0] in slots and self.inherited is not None else None, r[8])
            for r in raw
        ]


def _text(x) -> str:
    return x.decode(errors="replace") if isinstance(x, (bytes, bytearray)) else str(x)


# --- the stand-in -------------------------------------------------------------------------


class FakeProbe:
    """NVML answers from a JSON file (re-read on every call):

        {"gpus": [{"uuid": "GPU-fake-0", "name": "Fake H100", "pci_bus_id": "00000000:17:00.0",
                   "total_mib": 81559, "base_used_mib": 0, "util_pct": 35,
                   "processes": [{"pid": 4242, "used_mib": 61000, "name": "python"}]}],
         "free_dead_after_s": 0.0}

    A listed process that is no longer alive keeps its memory for `free_dead_after_s` seconds
    after this probe first saw it dead (the driver's lag in freeing a dead process's memory),
    then disappears, as on a real GPU. Names come from the live process when the pid exists.
    `"unavailable": "why"` makes it behave as a machine without NVML.
    """

    kind = "fake"

    def __init__(self, path: Path | str, inherited: Optional[str] = None, use_env: bool = True):
        self.path = Path(path)
        self.inherited = inherited_visible_devices() if use_env and inherited is None else inherited
        self._dead_since: dict[int, float] = {}

    def read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            raise ProbeUnavailable(f"fake GPU file {self.path} is missing") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ProbeUnavailable(f"fake GPU file {self.path} is unreadable ({exc})") from None

    def inventory(self) -> list[GpuInfo]:
        doc = self.read()
        if doc.get("unavailable"):
            raise ProbeUnavailable(str(doc["unavailable"]))
        lag = float(doc.get("free_dead_after_s", 0.0))
        now = time.monotonic()
        raw = []
        for i, g in enumerate(doc.get("gpus", [])):
            plist = []
            for p in g.get("processes", []):
                pid = int(p["pid"])
                if not _pid_alive(pid):
                    since = self._dead_since.setdefault(pid, now)
                    if now - since >= lag:
                        continue
                pname, visible = _proc_name(pid, p.get("name", "?"))
                plist.append(GpuProcess(pid, pname if visible else p.get("name", "?"), int(p.get("used_mib", 0)), visible))
            total = int(g.get("total_mib", 81559))
            used = min(total, int(g.get("base_used_mib", 0)) + sum(p.used_mib or 0 for p in plist))
            util = g.get("util_pct")
            raw.append((i, g.get("uuid", f"GPU-fake-{i}"), g.get("name", "Fake GPU"),
                        g.get("pci_bus_id", f"00000000:{0x10 + i:02x}:00.0"), total, used, total - used, tuple(plist),
                        None if util is None else int(util)))
        slots = cuda_order([(r[0], r[1], r[3]) for r in raw], self.inherited)
        return [
            GpuInfo(r[0], slots[r[0]].index_cuda if r[0] in slots else None, r[1], r[2], r[3], r[4], r[5], r[6], r[7],
                    slots[r[0]].token if r[0] in slots and self.inherited is not None else None, r[8])
            for r in raw
        ]


def probe_from_env(env: Optional[dict] = None) -> GpuProbe:
    """`OPSDCTL_GPU_PROBE=fake:/path.json` -> FakeProbe; anything else (or unset) -> NvmlProbe."""
    env = os.environ if env is None else env
    spec = env.get(ENV_PROBE, "nvml").strip()
    if spec.startswith("fake:"):
        return FakeProbe(spec[len("fake:"):])
    return NvmlProbe()


# --- the check before a stage -------------------------------------------------------------


@dataclass(frozen=True)
class GpuCheck:
    ok: bool
    reason: str  # "" when ok
    problems: tuple[str, ...] = ()
    holders: tuple[dict, ...] = ()  # {"gpu": cuda index, "pid", "name", "used_mib"} on the GPUs that block


def check_gpus(inventory: Sequence[GpuInfo], wanted: Sequence[int], min_free_mib: int) -> GpuCheck:
    """Every wanted CUDA index exists and has at least min_free_mib free.

    The reason names each blocking GPU with its holders (pid, name, MiB), e.g.
    "GPU 0: 12000 MiB free < 70000 needed; held by pid 4242 python (61000 MiB)".
    """
    by_cuda = {g.index_cuda: g for g in inventory if g.index_cuda is not None}
    problems, holders = [], []
    for idx in wanted:
        g = by_cuda.get(idx)
        if g is None:
            seen = ", ".join(str(i) for i in sorted(by_cuda)) or "none"
            problems.append(f"GPU {idx} does not exist (CUDA sees {seen})")
            continue
        if g.free_mib < min_free_mib:
            problems.append(f"GPU {idx}: {g.free_mib} MiB free < {min_free_mib} needed; held by {g.holders_text()}")
            holders += [{"gpu": idx, "pid": p.pid, "name": p.name, "used_mib": p.used_mib} for p in g.processes]
    return GpuCheck(not problems, "; ".join(problems), tuple(problems), tuple(holders))


def own_holdings(inventory: Sequence[GpuInfo], pids: Sequence[int]) -> list[tuple[int, GpuProcess]]:
    """(nvml index, process) for every listed GPU process whose pid is one of `pids`."""
    mine = set(int(p) for p in pids)
    return [(g.index_nvml, p) for g in inventory for p in g.processes if p.pid in mine]


# --- `opsdctl gpus` / status --------------------------------------------------------------


@dataclass
class GpuReport:
    probe: str
    available: bool
    error: Optional[str]
    configured: object  # "all" | list[int]
    min_free_mib: int
    cuda_visible_devices: Optional[str]
    gpus: list[GpuInfo] = field(default_factory=list)
    check: Optional[GpuCheck] = None
    note: Optional[str] = None

    def to_json(self) -> dict:
        return {
            "probe": self.probe,
            "available": self.available,
            "error": self.error,
            "devices": self.configured,
            "min_free_mib": self.min_free_mib,
            "cuda_visible_devices": self.cuda_visible_devices,
            "gpus": [g.to_json() for g in self.gpus],
            "ready": None if self.check is None else self.check.ok,
            "blocked": None if self.check is None or self.check.ok else self.check.reason,
            "note": self.note,
        }


def gpu_report(devices, min_free_mib: int, probe: Optional[GpuProbe] = None) -> GpuReport:
    """The inventory with holders, and whether the configured devices are ready now."""
    probe = probe if probe is not None else probe_from_env()
    cvd = inherited_visible_devices()
    try:
        inv = probe.inventory()
    except ProbeUnavailable as exc:
        note = None
        if devices:
            note = (f"[gpus] devices = {devices!r} but {exc}: no GPU gate; stages get CUDA_VISIBLE_DEVICES "
                    "without any check")
        return GpuReport(probe.kind, False, str(exc), devices, min_free_mib, cvd, note=note)
    wanted = [g.index_cuda for g in inv if g.index_cuda is not None] if devices == "all" else list(devices or [])
    check = check_gpus(inv, wanted, min_free_mib) if wanted else None
    return GpuReport(probe.kind, True, None, devices, min_free_mib, cvd, inv, check)


def gpus_status(cfg) -> dict:
    """The GPU part of `opsdctl status`: the inventory with holders when [gpus] devices names
    any (probing NVML then); nothing is probed for devices = [] (no GPUs, no gate)."""
    if not cfg.devices:
        return {"gate": "off", "devices": [], "gpus": [], "note": "devices = []: no GPUs, no gate"}
    rep = gpu_report(cfg.devices, cfg.min_free_mib)
    return {"gate": "on" if rep.available else "off", **rep.to_json()}


def resolve_devices(devices) -> tuple[int, ...]:
    """Configured devices as CUDA indices; "all" asks NVML how many there are."""
    if devices == "all":
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                return tuple(range(pynvml.nvmlDeviceGetCount()))
            finally:
                pynvml.nvmlShutdown()
        except Exception as exc:  # NVML missing: no driver, no GPUs
            raise UserError(
                f'[gpus] devices = "all" but NVIDIA\'s NVML is not available here ({type(exc).__name__}); '
                "list the devices, or set devices = [] to run without GPUs"
            ) from None
    return tuple(devices)
