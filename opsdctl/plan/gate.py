"""The worker's one seam for scheduling policy: which chain runs, on which GPUs, and when to stop.

The worker asks its Gate, in this order:

  order(queued)                 -> the queued chains in the order to try them
  admit(chain)                  -> Start(gpus=None) | Skip(reason) | Wait(seconds, reason)   before a chain
  grant(chain, stage)           -> Grant(gpus) | Skip(reason) | Wait(seconds, reason) before each stage
  on_progress(chain, stage, rec)-> None | Stop(reason, state)   for every progress record of a stage
  released(chain, stage, pids)  -> returns once the stage's own processes freed their GPU memory

`Start(gpus=k)` runs the chain on a wider slot than the layout's (the planner's last resort near
the deadline; only stages whose command takes {num_gpus} or {gpus} widen).
`Skip` from `admit` marks the chain `skipped` with the reason and the worker tries the next one;
`Wait` keeps it queued and the worker asks again after the given seconds (waits are bounded by
the gate, which turns them into a Skip when it gives up). `Skip` from `grant` ends a running chain
`skipped`. `Stop` from `on_progress` stops the stage's process group and ends the chain in
`state` with the reason (the stage's partial result is kept, flagged partial).

The worker's Gate is the planner (opsdctl.plan.planner.make_planner_gate: budget admission,
duration estimates, adaptive order, futility); tests drive the worker with simpler gates of their
own. Which GPUs a stage runs on is not the gate's: the worker's GPU pool hands each stage its own
(opsdctl.daemon.gpu_pool) and checks them with NVML (opsdctl.daemon.gpu_gate). A Grant's `gpus`
are used only when the worker has no GPUs of its own to share out ([gpus] devices = []).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol, Sequence, Union

from opsdctl.store.states import State


AUTO_REPEAT_REASON = "auto-repeat: "  # how a chain the worker queued itself says so (Chain.reason)


@dataclass(frozen=True)
class ChainInfo:
    """What a policy may look at: one chain, its recipe, its history so far."""

    chain_id: int
    variant: str  # label: name or name@vN
    variant_id: int
    variant_name: str
    version: int
    hash: str
    seed: int
    repeat: int
    priority: int
    profile: str
    hparams: dict = field(default_factory=dict)
    method: dict = field(default_factory=dict)
    requeued_from: Optional[int] = None
    eval_problems: Optional[int] = None  # a partial evaluation's problems x samples (None: full)
    eval_k: Optional[int] = None
    eval_only: bool = False  # no train stage
    auto: bool = False  # queued by the worker's auto-repeat, not by the user

    @property
    def partial(self) -> bool:
        return self.eval_problems is not None or self.eval_k is not None


def chain_info(chain, variant) -> ChainInfo:
    """The policy's view of a store row pair (Chain, Variant)."""
    return ChainInfo(
        chain_id=chain.id,
        variant=variant.label,
        variant_id=variant.id,
        variant_name=variant.name,
        version=variant.version,
        hash=variant.hash,
        seed=chain.seed,
        repeat=chain.repeat,
        priority=chain.priority,
        profile=chain.profile,
        hparams=dict(variant.hparams),
        method=dict(variant.method),
        requeued_from=chain.requeued_from,
        eval_problems=chain.eval_problems,
        eval_k=chain.eval_k,
        eval_only=bool(chain.eval_only),
        auto=(chain.reason or "").startswith(AUTO_REPEAT_REASON),
    )


@dataclass(frozen=True)
class Start:
    gpus: Optional[int] = None  # run each stage that can (its command takes {num_gpus}) on this many GPUs


@dataclass(frozen=True)
class Skip:
    reason: str


@dataclass(frozen=True)
class Wait:
    seconds: float
    reason: str


@dataclass(frozen=True)
class Grant:
    gpus: tuple[int, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the stage (e.g. CUDA_DEVICE_ORDER)
    visible: Optional[str] = None  # CUDA_VISIBLE_DEVICES and {gpus} text when not the indices themselves
    estimate_seconds: Optional[float] = None  # the planner's estimate of the stage, recorded on its row


@dataclass(frozen=True)
class Stop:
    reason: str
    state: State  # the chain's end state; must be allowed from `running`


Admission = Union[Start, Skip, Wait]
StageGrant = Union[Grant, Skip, Wait]


class Gate(Protocol):
    def order(self, queued: Sequence[ChainInfo]) -> list[ChainInfo]: ...

    def admit(self, chain: ChainInfo) -> Admission: ...

    def grant(self, chain: ChainInfo, stage: str) -> StageGrant: ...

    def on_progress(self, chain: ChainInfo, stage: str, record: dict) -> Optional[Stop]: ...

    def released(self, chain: ChainInfo, stage: str, pids: Sequence[int]) -> None: ...
