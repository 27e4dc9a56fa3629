"""The projected timeline: when each queued chain would start and end, and which will not fit.

Pure: seconds from now, estimates in, one list out. It walks the queue in the planned order as
the worker will: the running chain first (its remaining time from the median estimates and
the elapsed time of its stage), then each queued chain. A chain that the policy will skip, or
whose high-quantile estimate does not fit in the usable time left at its projected start, is
marked and does not advance the clock (the worker skips it and goes on to the next one);
the others start when the previous one is projected to end (median estimates).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping, Optional, Sequence

from opsdctl.admission import admit_chain
from opsdctl.durations import Estimate


@dataclass(frozen=True)
class Running:
    chain_id: int
    variant: str
    stage: Optional[str]  # None: claimed, waiting for its first grant
    stage_elapsed_s: float
    train: Estimate
    eval: Estimate


@dataclass(frozen=True)
class Queued:
    chain_id: int
    variant: str
    train: Estimate
    eval: Estimate


@dataclass(frozen=True)
class Entry:
    chain_id: int
    variant: str
    state: str  # "running" | "queued"
    start_in_s: Optional[float]
    end_in_s: Optional[float]
    median_s: float
    high_s: float
    fits: bool
    reason: Optional[str]  # why it will not run (skip by policy, or does not fit)

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("start_in_s", "end_in_s", "median_s", "high_s"):
            if d[k] is not None:
                d[k] = round(d[k], 1)
        return d


def remaining_s(r: Running) -> float:
    """Median time left of a running chain (a stage past its median is assumed nearly done)."""
    if r.stage == "eval":
        return max(0.0, r.eval.median_s - r.stage_elapsed_s)
    if r.stage == "train":
        return max(0.0, r.train.median_s - r.stage_elapsed_s) + r.eval.median_s
    return r.train.median_s + r.eval.median_s


def project(
    usable_s: Optional[float],
    running: Sequence[Running],
    queued: Sequence[Queued],
    skips: Optional[Mapping[int, str]] = None,
) -> list[Entry]:
    """The timeline from now (t = 0). `usable_s`: usable seconds left now (None: no budget)."""
    skips = skips or {}
    out: list[Entry] = []
    t = 0.0
    for r in running:
        left = remaining_s(r)
        out.append(Entry(r.chain_id, r.variant, "running", 0.0, left, r.train.median_s + r.eval.median_s,
                         r.train.high_s + r.eval.high_s, True, None))
        t = max(t, left)
    for q in queued:
        median = q.train.median_s + q.eval.median_s
        high = q.train.high_s + q.eval.high_s
        if q.chain_id in skips:
            out.append(Entry(q.chain_id, q.variant, "queued", None, None, median, high, False, skips[q.chain_id]))
            continue
        fit = admit_chain(q.train.high_s, q.eval.high_s, None if usable_s is None else usable_s - t)
        if not fit.ok:
            out.append(Entry(q.chain_id, q.variant, "queued", None, None, median, high, False,
                             f"will not fit: {fit.reason} at its turn"))
            continue
        out.append(Entry(q.chain_id, q.variant, "queued", t, t + median, median, high, True, None))
        t += median
    return out
