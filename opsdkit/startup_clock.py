"""Seconds since this process started, for start-up breakdowns (imports, engine, first token).

A stage's start-up is mostly spent before our code runs (the interpreter, torch, vLLM), so a
timer started in `main` would miss it; the kernel's record of the process start does not.
"""

from __future__ import annotations

import os
import time


def process_start_epoch() -> float | None:
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # psutil missing or /proc unreadable: callers report no breakdown
        return None


def _linux_age() -> float | None:
    # Both numbers count from boot in clock ticks, so the age is exact to 10 ms; psutil's
    # create_time() adds the boot time, which /proc/stat gives in whole seconds.
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def since_process_start() -> float | None:
    age = _linux_age()
    if age is None:
        start = process_start_epoch()
        age = None if start is None else time.time() - start
    return None if age is None else round(max(0.0, age), 2)


class Phases:
    """Named phase durations, in order: mark(name) closes the phase that began at the last mark."""

    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._last = clock()
        self.seconds: dict[str, float] = {}

    def mark(self, name: str) -> float:
        now = self._clock()
        self.seconds[name] = round(now - self._last, 2)
        self._last = now
        return self.seconds[name]

    def summary(self) -> dict:
        out = dict(self.seconds)
        age = since_process_start()
        if age is not None:
            out["since_process_start"] = age
        return out
