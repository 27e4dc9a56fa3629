"""The time budget: how many seconds are left, from one of three sources.

- remaining_file: one number of seconds, re-read on every call; we subtract the time since the
  file was last written, so a countdown updated once a minute is still read to the second;
- deadline: an absolute time;
- hours: counted from the first worker start on this store (recorded in the store, so a worker
  restarted after a crash does not get a fresh budget; `opsdctl budget --restart-clock` resets it).

The usable time is what is left minus `margin_minutes`.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from opsdctl.config import BudgetConfig

CLOCK_KEY = "budget_clock_started_at"  # Meta key: epoch seconds, as text
# A countdown claiming more than this is not a countdown (1e20 s would overflow every clock).
MAX_REMAINING_S = 366 * 24 * 3600.0


@dataclass(frozen=True)
class BudgetView:
    kind: str  # "none" | "remaining_file" | "deadline" | "hours"
    seconds_left: Optional[float]  # None: unlimited, or unknown (see error)
    margin_seconds: float
    deadline: Optional[dt.datetime]  # aware, when known
    clock_started: Optional[bool] = None  # hours: has a worker started the clock?
    source: str = ""
    error: Optional[str] = None  # the source could not be read
    kept: bool = False  # error, but seconds_left counts down from the last deadline the worker read

    @property
    def usable_seconds(self) -> Optional[float]:
        if self.seconds_left is None:
            return None
        return self.seconds_left - self.margin_seconds

    @property
    def limited(self) -> bool:
        return self.kind != "none"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "seconds_left": None if self.seconds_left is None else round(self.seconds_left, 1),
            "usable_seconds": None if self.usable_seconds is None else round(self.usable_seconds, 1),
            "margin_seconds": self.margin_seconds,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "clock_started": self.clock_started,
            "source": self.source,
            "error": self.error,
            "kept": self.kept,
        }

    def text(self) -> str:
        if self.kind == "none":
            return "no budget set (unlimited)"
        if self.error and not self.kept:
            return f"unknown ({self.error})"
        left = fmt_duration(max(0.0, self.seconds_left or 0.0))
        usable = self.usable_seconds or 0.0
        extra = "" if self.clock_started is not False else " (clock starts with the first worker)"
        tail = f", {fmt_duration(max(0.0, usable))} usable after the {fmt_duration(self.margin_seconds)} margin"
        if usable <= 0:
            tail = f", inside the {fmt_duration(self.margin_seconds)} margin: no new chains start"
        if self.kept:
            extra += f" (from the last deadline read; now {self.error})"
        return f"{left} left{tail}{extra}"


def budget_now(cfg: BudgetConfig, clock_start: Optional[float], now: Optional[float] = None) -> BudgetView:
    """The budget at `now` (epoch seconds). `clock_start` is the store's hours-clock start."""
    now = time.time() if now is None else now
    margin = cfg.margin_minutes * 60.0
    kind = cfg.kind
    if kind == "remaining_file":
        path = Path(cfg.remaining_file)
        secs, age, why = read_remaining(path, now)
        if why is not None:
            return BudgetView(kind, None, margin, None, source=str(path), error=f"{path} {why}")
        left = secs - age
        return BudgetView(kind, left, margin, _at(now + left), source=str(path))
    if kind == "deadline":
        deadline = cfg.deadline
        return BudgetView(kind, deadline.timestamp() - now, margin, deadline, source=deadline.isoformat())
    if kind == "hours":
        total = cfg.hours * 3600.0
        if clock_start is None:
            return BudgetView(kind, total, margin, None, clock_started=False, source=f"{cfg.hours:g} h")
        end = clock_start + total
        return BudgetView(kind, end - now, margin, _at(end), clock_started=True, source=f"{cfg.hours:g} h")
    return BudgetView("none", None, margin, None)


def read_remaining(path: Path, now: float) -> tuple[float, float, Optional[str]]:
    """(seconds in the file, seconds since it was written, None) or (0, 0, why it is unknown):
    missing, empty (being rewritten), not a number, not finite, or absurd."""
    try:
        text = path.read_text(encoding="utf-8").strip()
        age = max(0.0, now - os.stat(path).st_mtime)
    except FileNotFoundError:
        return 0.0, 0.0, "is missing"
    except (OSError, UnicodeDecodeError) as exc:
        return 0.0, 0.0, f"is unreadable ({getattr(exc, 'strerror', None) or type(exc).__name__})"
    if not text:
        return 0.0, 0.0, "is empty"
    word = text.split()[0]
    try:
        secs = float(word)
    except ValueError:
        return 0.0, 0.0, f"holds {word[:40]!r}, not a number of seconds"
    if not math.isfinite(secs) or abs(secs) > MAX_REMAINING_S:
        return 0.0, 0.0, f"holds {word[:40]!r}, not a plausible number of seconds left"
    return secs, age, None


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.timezone.utc).astimezone()


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s" if minutes < 10 else f"{minutes}m"
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m"


def clock_start(reader) -> Optional[float]:
    """When the first worker started the hours clock (epoch seconds), from the store's reader
    (opsdctl.store.reader; `open_reader(store)` for a Store)."""
    value = reader.get_meta(CLOCK_KEY)
    return float(value) if value else None
