"""The worker's budget when its source goes quiet: the last deadline it read, never "unlimited".

A `remaining_file` can be missing, empty while it is being rewritten, or hold junk (`nan`,
`1e20`). Planning as if there were no budget would start a 45-minute chain with 10 minutes
left. So the worker keeps the last deadline it read and counts down from it; if it never read
one, it holds (starts nothing) and says why. The last deadline is written to the store's meta
table so `status` plans with the same one while that worker runs.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

from opsdctl.config import BudgetConfig
from opsdctl.plan.budget import BudgetView, _at, budget_now

LAST_DEADLINE_KEY = "budget_last_deadline"  # Meta: epoch seconds of the last deadline read
REWRITE_S = 30.0  # a deadline that moved less than this is not written to the store again


def with_kept_deadline(view: BudgetView, last_deadline: Optional[float], now: float) -> BudgetView:
    """`view`, or, when its source is unknown, the countdown from `last_deadline`."""
    if view.error is None or last_deadline is None:
        return view
    return dataclasses.replace(view, seconds_left=last_deadline - now, deadline=_at(last_deadline), kept=True)


def hold_reason(view: BudgetView) -> Optional[str]:
    """Why no chain may start now, when the budget is unknown and no deadline was ever read."""
    if view.limited and view.seconds_left is None:
        return f"budget unknown: {view.error}; no chain starts until it can be read"
    return None


class BudgetKeeper:
    def __init__(self, cfg: BudgetConfig, clock_start: Optional[float], store=None,
                 clock: Callable[[], float] = time.time, report: Callable[[str], None] = lambda msg: None):
        self.cfg = cfg
        self.clock_start = clock_start
        self.store = store
        self.clock = clock
        self.report = report
        self.deadline: Optional[float] = None
        self._stored: Optional[float] = None
        self._last_error: Optional[str] = None

    def view(self) -> BudgetView:
        now = self.clock()
        view = budget_now(self.cfg, self.clock_start, now)
        if view.kind == "none":
            return view
        if view.error is None:
            if self._last_error is not None:
                self.report(f"budget readable again: {view.text()}")
                self._last_error = None
            self._remember(now + view.seconds_left)
            return view
        if view.error != self._last_error:
            self._last_error = view.error
            self.report(f"budget unknown ({view.error}); " + (
                "keeping the last deadline read" if self.deadline is not None else "holding: no chain starts"))
        return with_kept_deadline(view, self.deadline, now)

    def usable_seconds(self) -> Optional[float]:
        return self.view().usable_seconds

    def _remember(self, deadline: float) -> None:
        self.deadline = deadline
        if self.store is None or (self._stored is not None and abs(deadline - self._stored) < REWRITE_S):
            return
        from opsdctl.store.engine import save_meta

        try:
            save_meta(self.store, LAST_DEADLINE_KEY, repr(deadline))
            self._stored = deadline
        except Exception:  # status's copy is a courtesy; the worker's own is in memory
            pass


def forget_deadline(session) -> None:
    """A new worker starts from what it reads itself, not from an earlier worker's deadline."""
    from opsdctl.store.engine import set_meta

    set_meta(session, LAST_DEADLINE_KEY, None)
