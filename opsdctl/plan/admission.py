"""Admission: start work only when its high-quantile estimate fits in the usable time left.

Pure functions of seconds. `usable` is the budget's time left minus the margin
(BudgetView.usable_seconds); None means no budget (everything fits).

- a chain starts only if high(train) + high(eval) <= usable; otherwise it is skipped with
  "needs ~46 min, 31 min left" and the worker goes on to the next chain in order (which may be
  a shorter one: another cost key, or history that says it is quicker);
- before the eval stage the eval alone is checked again (training may have run long, or the
  GPUs may have made it wait): an eval that would be cut by the deadline is not started;
- before the train stage (after a possible GPU wait) the whole chain is checked again;
- with several chains at once (gpus_per_chain), a chain's end is projected on the slot it will
  get: the waits for its GPUs behind the chains running now, then its own high estimates
  (`fits_after_wait`; the planner runs the projection, opsdctl.plan.timeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


def minutes_text(seconds: float) -> str:
    """A stage-sized duration: seconds under a minute (a demo's stages take a few), else minutes."""
    if seconds < 59.5:
        return f"{max(0.0, seconds):.0f} s"
    m = seconds / 60.0
    if m < 10:
        return f"{m:.1f} min".replace(".0 min", " min")
    return f"{m:.0f} min"


@dataclass(frozen=True)
class Fit:
    ok: bool
    need_s: float
    usable_s: Optional[float]
    reason: str = ""  # "needs ~46 min, 31 min left" when not ok
    wait_s: float = 0.0  # before it can start: its GPUs are projected busy this long


def fits(need_s: float, usable_s: Optional[float], what: str = "") -> Fit:
    """Does work estimated at `need_s` (high quantile) fit in `usable_s`?"""
    if usable_s is None:
        return Fit(True, need_s, None)
    if need_s <= usable_s:
        return Fit(True, need_s, usable_s)
    left = max(0.0, usable_s)
    prefix = f"{what} " if what else ""
    return Fit(False, need_s, usable_s, f"{prefix}needs ~{minutes_text(need_s)}, {minutes_text(left)} left")


def fits_after_wait(need_s: float, end_s: float, usable_s: Optional[float]) -> Fit:
    """Work of `need_s` (high quantile) that is projected to end at `end_s` from now, after
    waiting for its GPUs (several chains at once: opsdctl.plan.timeline), against `usable_s`."""
    wait = max(0.0, end_s - need_s)
    if usable_s is None or end_s <= usable_s:
        return Fit(True, need_s, usable_s, wait_s=wait)
    after = f" after ~{minutes_text(wait)} for its GPUs" if wait >= 0.5 else ""
    return Fit(False, need_s, usable_s, f"needs ~{minutes_text(need_s)}{after}, "
                                        f"{minutes_text(max(0.0, usable_s))} left", wait)


def admit_chain(train_high_s: float, eval_high_s: float, usable_s: Optional[float]) -> Fit:
    """The whole chain (train + eval, high quantiles) against the usable time."""
    return fits(train_high_s + eval_high_s, usable_s)


def admit_eval(eval_high_s: float, usable_s: Optional[float]) -> Fit:
    """Re-check before the eval stage starts."""
    return fits(eval_high_s, usable_s, "eval")
