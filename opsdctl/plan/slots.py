"""GPU slots: how the worker's devices are shared out between chains running at once.

`gpus_per_chain = G` splits the configured devices into disjoint slots of G GPUs (devices[0:G],
devices[G:2G], ...); unset, one slot holds every device, and one chain runs at a time. A stage
may ask for its own count (`[stages.eval] gpus = 1`): it then runs on an aligned block of that
many GPUs. The worker runs up to `devices / the smallest stage's GPUs` chains at once; each
stage waits for its own GPUs (opsdctl.daemon.gpu_pool hands them out first come, first served).
The rule that a layout is valid (divisors, at most the devices) is config's
`check_gpu_layout`, run at load and again here once `devices = "all"` is counted.

Pure: devices in, numbers out. The planner reads a Layout to price a chain on the slot it will
get and to project each slot's timeline; it never probes a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Optional, Sequence

from opsdctl.config import check_gpu_layout
from opsdctl.errors import UserError

STAGE_NAMES = ("train", "eval")


@dataclass(frozen=True)
class Layout:
    devices: tuple[int, ...] = ()  # the CUDA indices the worker grants
    per_chain: Optional[int] = None  # gpus_per_chain; None: every device (one chain at a time)
    stage_gpus: tuple[tuple[str, int], ...] = ()  # [stages.<name>] gpus, where set

    @property
    def width(self) -> int:
        """A slot's GPUs: gpus_per_chain, else every device (0 without GPUs)."""
        return self.per_chain or len(self.devices)

    def gpus_of(self, stage: str) -> int:
        """The GPUs `stage` runs on."""
        return dict(self.stage_gpus).get(stage, self.width) if self.devices else 0

    @property
    def slots(self) -> tuple[tuple[int, ...], ...]:
        """The disjoint groups of `width` devices, in device order."""
        w = self.width
        if not w:
            return ((),)
        return tuple(self.devices[i:i + w] for i in range(0, len(self.devices), w))

    @property
    def max_chains(self) -> int:
        """Chains running at once: the devices over the smallest stage's GPUs (1 without GPUs)."""
        if not self.devices:
            return 1
        return len(self.devices) // min(self.gpus_of(s) for s in STAGE_NAMES)

    @property
    def serial(self) -> bool:
        """One chain at a time over every device: the layout of an unset gpus_per_chain."""
        return self.max_chains == 1

    def to_json(self) -> dict:
        return {"devices": list(self.devices), "gpus_per_chain": self.per_chain,
                "stage_gpus": dict(self.stage_gpus), "slots": [list(x) for x in self.slots] if self.devices else [],
                "max_chains": self.max_chains}

    @classmethod
    def from_json(cls, doc: dict) -> "Layout":
        return cls(tuple(int(d) for d in doc.get("devices") or ()), doc.get("gpus_per_chain"),
                   tuple(sorted((str(k), int(v)) for k, v in (doc.get("stage_gpus") or {}).items())))

    def describe(self) -> str:
        if not self.devices:
            return "no GPUs: one chain at a time"
        own = ", ".join(f"{s} on {k}" for s, k in self.stage_gpus)
        tail = f" ({own} GPU(s) per stage)" if own else ""
        if self.serial:
            return f"one chain at a time on GPUs {_ids(self.devices)}{tail}"
        return (f"up to {self.max_chains} chains at once in {len(self.slots)} slot(s) of {self.width} GPU(s): "
                + ", ".join(_ids(s) for s in self.slots) + tail)


def pick_block(layout: Layout, held: Collection[int], count: int, prefer: Collection[int] = ()) -> Optional[tuple[int, ...]]:
    """Which `count` GPUs a stage gets, of those not `held`: an aligned block of `count`
    (devices[i*count:(i+1)*count]); among the free ones, `prefer`'s first (the chain's GPUs of its
    previous stage), then one inside a slot already partly held (whole slots stay whole for
    wider stages), then the lowest. None when no aligned block is free. The daemon's pool and the
    projected timeline both take GPUs by this rule."""
    devices = layout.devices
    blocks = [devices[i:i + count] for i in range(0, len(devices), count)]
    free = [b for b in blocks if not any(g in held for g in b)]
    if not free:
        return None
    width, prefer = layout.width, set(prefer)

    def slot_in_use(block) -> bool:
        if count >= width:
            return False
        start = devices.index(block[0]) // width * width
        return any(g in held for g in devices[start:start + width])

    return min(free, key=lambda b: (not set(b) <= prefer, not slot_in_use(b), devices.index(b[0])))


def slot_of(layout: Layout, gpus: Sequence[int]) -> Optional[int]:
    """The slot (index into layout.slots) that holds the first of `gpus`; None without GPUs."""
    if not gpus or gpus[0] not in layout.devices or not layout.width:
        return None
    return layout.devices.index(gpus[0]) // layout.width


def _ids(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices)


def configured_layout(cfg, saved: Optional[dict] = None) -> Layout:
    """The layout without probing a GPU (status, compare, advise): the config's device list, or
    for `devices = "all"` the layout the worker resolved and saved with its plan (`saved`), else
    none known (no GPUs)."""
    devices = cfg.devices
    if devices == "all":
        return Layout.from_json(saved) if saved else Layout()
    try:
        return layout_of(cfg, tuple(devices))
    except UserError:
        return Layout()


def layout_of(cfg, devices: Sequence[int]) -> Layout:
    """The layout of `cfg` over the resolved CUDA indices `devices` (raises config's one-line
    UserError for a layout the devices cannot hold)."""
    base = cfg.section("")
    per_chain = base.get("gpus_per_chain")
    stage_gpus = {s: cfg.section(f"stages.{s}").get("gpus") for s in STAGE_NAMES}
    stage_gpus = {s: k for s, k in stage_gpus.items() if k is not None}
    executor = base.get("executor") or "local"
    shared_recipe = bool(cfg.section("stages.train").get("recipe_env_path")) and not cfg.snapshot_code
    check_gpu_layout(len(devices), per_chain, stage_gpus, executor, cfg.where, shared_recipe)
    if executor == "ray" or not devices:
        return Layout(tuple(devices))
    return Layout(tuple(devices), per_chain or None, tuple(sorted(stage_gpus.items())))
