"""A gate for tests that drive the worker without the planner: it admits every chain while the
budget has time left and grants every configured device. Tests subclass it to script one answer."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from opsdctl.plan.gate import Admission, ChainInfo, Grant, Skip, StageGrant, Start, Stop


class DefaultGate:
    """Admit every chain while the budget has time left; grant all configured devices."""

    def __init__(self, devices: Sequence[int], budget_left: Optional[Callable[[], Optional[float]]] = None):
        self.devices = tuple(devices)
        self.budget_left = budget_left  # usable seconds left (after the margin), None = unlimited

    def order(self, queued: Sequence[ChainInfo]) -> list[ChainInfo]:
        return list(queued)  # the store's order: priority, then queue order

    def admit(self, chain: ChainInfo) -> Admission:
        left = self.budget_left() if self.budget_left else None
        if left is not None and left <= 0:
            return Skip("budget exhausted: no time left before the deadline margin")
        return Start()

    def grant(self, chain: ChainInfo, stage: str) -> StageGrant:
        return Grant(self.devices)

    def on_progress(self, chain: ChainInfo, stage: str, record: dict) -> Optional[Stop]:
        return None

    def released(self, chain: ChainInfo, stage: str, pids: Sequence[int]) -> None:
        return None
