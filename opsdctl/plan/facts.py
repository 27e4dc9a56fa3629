"""What the planner reads of the world, and what it may write: the `Facts` its gate is given.

The worker's Facts are the store (opsdctl.plan.store_facts.StoreFacts); `opsdctl simulate`'s are
a simulated session. Every member is declared here and every Facts has them all: the gate calls
them without probing. `NoFacts` is a world with no store: no history, no runs, nothing written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

from opsdctl.plan.durations import Sample
from opsdctl.plan.gate import ChainInfo


@dataclass(frozen=True)
class LiveChain:
    """A chain running now: where it is, and the GPUs its stage holds (what the slots' timeline
    and admission on slots start from)."""

    info: ChainInfo
    stage: Optional[str]  # None: claimed, waiting for its first stage's GPUs
    elapsed_s: float  # in that stage
    gpus: tuple[int, ...] = ()  # CUDA indices its stage holds (() : none, or not indices)


class Facts(Protocol):
    """What the planner reads (and the writes it may make: an --auto-repeat chain, the plan for status)."""

    def runs(self) -> list: ...  # compare.RunRecord of every succeeded, scored chain

    def samples(self) -> list[Sample]: ...  # succeeded stages' durations

    def baseline_label(self) -> Optional[str]: ...

    def candidates(self, chain_ids: Sequence[int]) -> dict[int, str]: ...  # chain id -> its candidate's label

    def dropped(self) -> dict[str, str]: ...  # variant label -> why its runs stop (futile)

    def latest_training(self) -> Optional[ChainInfo]: ...  # what a repeat would cost like

    def reeval_targets(self, runs: list) -> dict: ...  # label -> reeval.Target: the training a re-eval would take

    def queue_repeat(self, variant: str, why: str) -> Optional[ChainInfo]: ...

    def queue_reeval(self, train_id: int, why: str) -> Optional[ChainInfo]: ...

    def save_plan(self, doc: dict) -> None: ...

    def running(self) -> list[LiveChain]: ...  # the chains running now, in chain order


class NoFacts:
    """No store (a gate built without one): no history, no runs, no candidates, nothing written;
    the baseline is the configured one."""

    def __init__(self, baseline: Optional[str] = None):
        self.baseline = baseline

    def runs(self) -> list:
        return []

    def samples(self) -> list[Sample]:
        return []

    def baseline_label(self) -> Optional[str]:
        return self.baseline

    def candidates(self, chain_ids: Sequence[int]) -> dict[int, str]:
        return {}

    def dropped(self) -> dict[str, str]:
        return {}

    def latest_training(self) -> Optional[ChainInfo]:
        return None

    def reeval_targets(self, runs: list) -> dict:
        return {}

    def queue_repeat(self, variant: str, why: str) -> Optional[ChainInfo]:
        return None

    def queue_reeval(self, train_id: int, why: str) -> Optional[ChainInfo]:
        return None

    def save_plan(self, doc: dict) -> None:
        return None

    def running(self) -> list[LiveChain]:
        return []
