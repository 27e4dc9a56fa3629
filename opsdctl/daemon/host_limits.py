"""Whether this host can hold the chains a worker runs at once: host RAM and CPU cores.

Every chain running at once brings its own processes to the host: a trainer with its colocated
vLLM engine (which parks the weights in host memory while it sleeps), and the evaluator,
pre-started while the trainer runs. benchmarks/gpu_throughput.py measures what one chain's
processes take (`host_per_chain` in benchmarks/results/throughput_<gpu>.json: peak PSS and mean
busy cores); the profile holds those needs, `[host] ram_gib_per_chain` and `cpus_per_chain` override
them (0 turns a check off).

`check_host(cfg, chains)` is the one call for the worker's start: it compares chains x the needs
with this host's RAM and CPUs (psutil, within the cgroup's limits and the CPU affinity) and refuses
a layout the host cannot hold with one line, before anything runs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from opsdctl.errors import UserError

GIB = 2**30
CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class HostNeeds:
    ram_gib_per_chain: float  # 0: not checked
    cpus_per_chain: float  # 0: not checked


@dataclass(frozen=True)
class HostResources:
    ram_gib: float
    cpus: float


@dataclass(frozen=True)
class HostVerdict:
    fits: bool
    chains_held: int  # how many chains at once the host holds (a large number when nothing is checked)
    reason: str | None  # why not, one line


def host_fits(chains: int, need: HostNeeds, have: HostResources) -> HostVerdict:
    """Whether `chains` chains at once fit the host's RAM and CPUs. Pure."""
    held = [math.floor(have.ram_gib / need.ram_gib_per_chain) if need.ram_gib_per_chain > 0 else None,
            math.floor(have.cpus / need.cpus_per_chain) if need.cpus_per_chain > 0 else None]
    limits = [h for h in held if h is not None]
    most = min(limits) if limits else 2**31 - 1
    if chains <= most:
        return HostVerdict(True, most, None)
    short = []
    if held[0] is not None and chains > held[0]:
        short.append(f"{chains * need.ram_gib_per_chain:g} GiB of RAM ({need.ram_gib_per_chain:g} each, "
                     f"ram_gib_per_chain) where the host has {have.ram_gib:.0f}")
    if held[1] is not None and chains > held[1]:
        short.append(f"{chains * need.cpus_per_chain:g} CPUs ({need.cpus_per_chain:g} each, cpus_per_chain) where "
                     f"the host has {have.cpus:g}")
    at_once = f"{most} chain{'s' if most != 1 else ''} at once" if most else "no chain"
    return HostVerdict(False, most, f"{chains} chain{'s' if chains != 1 else ''} at once need{'s' if chains == 1 else ''} "
                                    f"{' and '.join(short)}: this host holds {at_once}; "
                                    "give each chain more GPUs (gpus_per_chain) so fewer run at once, or lower the "
                                    "[host] needs if your chains take less")


def _cgroup_ram_bytes() -> float | None:
    try:
        text = (CGROUP / "memory.max").read_text().strip()
    except OSError:
        return None
    return None if text == "max" else float(text)


def _cgroup_cpus() -> float | None:
    try:
        quota, period = (CGROUP / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else float(quota) / float(period)


def host_resources() -> HostResources:
    """This host's RAM and CPUs as a process started here gets them: the machine's, within the
    cgroup's memory and CPU limits and the CPU affinity."""
    import psutil

    ram = float(psutil.virtual_memory().total)
    limit = _cgroup_ram_bytes()
    if limit is not None:
        ram = min(ram, limit)
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        cpus = float(psutil.cpu_count() or 1)
    quota = _cgroup_cpus()
    if quota is not None:
        cpus = min(cpus, quota)
    return HostResources(ram / GIB, cpus)


def needs_of(cfg) -> HostNeeds:
    """[host]'s needs, else the profile's; the profile's are those of its GPU workloads, so a worker
    without GPUs (`[gpus] devices = []`) checks only what [host] sets (the tiny profile: nothing)."""
    from opsdctl.recipes.profiles import get_profile

    section, prof = cfg.section("host"), get_profile(cfg.profile)
    gpus = cfg.devices == "all" or bool(cfg.devices)
    ram, cpus = section.get("ram_gib_per_chain"), section.get("cpus_per_chain")
    return HostNeeds(float(ram) if ram is not None else prof.host_ram_gib_per_chain if gpus else 0.0,
                     float(cpus) if cpus is not None else prof.host_cpus_per_chain if gpus else 0.0)


def check_host(cfg, chains: int, have: HostResources | None = None) -> HostVerdict:
    """The worker's start: refuse (UserError, one line) when `chains` chains at once do not fit."""
    verdict = host_fits(chains, needs_of(cfg), have or host_resources())
    if not verdict.fits:
        raise UserError(f"{cfg.where}: [host]: {verdict.reason}")
    return verdict


def chains_at_once(cfg) -> int:
    """How many chains this worker runs at once: its GPU layout's (`gpus_per_chain`, each stage's
    `gpus`); with Ray the chains run on the cluster's nodes, not on this host: 1."""
    from opsdctl.daemon.executors import executor_kind
    from opsdctl.daemon.gpu_probe import resolve_devices
    from opsdctl.plan.slots import layout_of

    if executor_kind(cfg) == "ray":
        return 1
    return layout_of(cfg, resolve_devices(cfg.devices)).max_chains
