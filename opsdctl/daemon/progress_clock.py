"""When a running stage last made progress, and how often it usually does: the stall rule.

The worker observes every progress record of a stage (`observe`); the times at which the count
moved give the stage's usual interval (the median of the recent gaps, robust to the long first
gap of model loading). A stage is stalled when it has not moved for STALL_FACTOR times that
interval. The worker writes `changed_at` / `interval_s` into the stage's progress document;
`opsdctl status` applies `stalled()` to them, so the verdict is current even when the worker
has nothing new to write.
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Optional

STALL_FACTOR = 3.0  # no progress for 3x the usual interval
MIN_GAPS = 2  # intervals needed before anything is called usual
KEEP_GAPS = 20  # the recent gaps the median is taken over
STORE_LAG_S = 2.5  # the worker writes progress to the store at most every 2 s: what status reads may lag


def _count(record: Optional[dict]) -> Optional[tuple]:
    if not record:
        return None
    for key in ("step", "done"):
        if isinstance(record.get(key), int):
            return key, record[key]
    return None


class ProgressClock:
    def __init__(self):
        self.last: Optional[tuple] = None
        self.changed_at: Optional[dt.datetime] = None
        self.gaps: list[float] = []

    def observe(self, record: Optional[dict], now: dt.datetime) -> None:
        count = _count(record)
        if count is None or count == self.last:
            return
        if self.changed_at is not None and self.last is not None:
            self.gaps = (self.gaps + [(now - self.changed_at).total_seconds()])[-KEEP_GAPS:]
        self.last, self.changed_at = count, now

    def interval_s(self) -> Optional[float]:
        # The first gap includes start-up (model load, first rollout): leave it out once others exist.
        gaps = self.gaps[1:] if len(self.gaps) > MIN_GAPS else self.gaps
        return statistics.median(gaps) if len(gaps) >= MIN_GAPS else None

    def fields(self) -> dict:
        """What goes into the stage's progress document."""
        interval = self.interval_s()
        return {"changed_at": None if self.changed_at is None else self.changed_at.isoformat(timespec="seconds"),
                "interval_s": None if interval is None else round(interval, 2)}


def stalled(progress: Optional[dict], now: dt.datetime, lag_s: float = 0.0) -> Optional[dict]:
    """{"for_s", "interval_s"} when the stage has not moved for STALL_FACTOR x its usual interval.
    `lag_s`: how stale `progress` may be (STORE_LAG_S for what the store holds)."""
    if not progress or not progress.get("changed_at") or not progress.get("interval_s"):
        return None
    try:
        since = dt.datetime.fromisoformat(progress["changed_at"])
    except (TypeError, ValueError):
        return None
    quiet = (now - since).total_seconds()
    interval = float(progress["interval_s"])
    if quiet < STALL_FACTOR * max(interval, 1.0) + lag_s:
        return None
    return {"for_s": round(quiet, 1), "interval_s": interval}
