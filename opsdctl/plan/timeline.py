"""The projected timeline: when each queued chain would start and end, and which will not fit.

`project` is the pure part; `planner_status` is the "planner" section of `opsdctl status` (it
reads the store and the worker's latest plan, and imports nothing heavy: status starts fast).

Pure: seconds from now, estimates in, one list out. It walks the queue in the planned order as
the worker will: the running chain first (its remaining time from the median estimates and
the elapsed time of its stage), then each queued chain. A chain that the policy will skip, or
whose high-quantile estimate does not fit in the usable time left at its projected start, is
marked and does not advance the clock (the worker skips it and goes on to the next one);
the others start when the previous one is projected to end (median estimates).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Mapping, Optional, Sequence

from opsdctl.plan.admission import admit_chain
from opsdctl.plan.durations import Estimate

PLAN_KEY = "planner_plan"  # Meta: the worker's latest plan (opsdctl.plan.planner), for `opsdctl status`


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


def load_plan(reader) -> Optional[dict]:
    text = reader.get_meta(PLAN_KEY)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


# --- `opsdctl status`: the projected timeline ---------------------------------------------


def planner_status(cfg, reader, usable_s: Optional[float]) -> dict:
    """The planner part of the status document: settings, the latest plan, the projected
    timeline of the running and queued chains, and estimate vs actual of recent stages.
    Reads the store through `reader` only (no statistics imports: status must start fast)."""
    from opsdctl.plan.durations import estimator_for
    from opsdctl.store.states import State
    from opsdctl.store.values import utcnow

    pl = cfg.section("planner")
    plan = load_plan(reader)
    est = estimator_for(cfg, reader)
    with reader.snapshot() as r:
        variants = {v.id: v for v in r.all_variants()}
        running, queued = [], []
        for c in r.chains_in_state(State.RUNNING):
            v = variants[c.variant_id]
            rows = r.stages_of(c.id)
            cur = next((st for st in reversed(rows) if st.name == c.stage and st.state == "running"), None)
            elapsed = (utcnow() - cur.started_at).total_seconds() if cur is not None else 0.0
            tr, ev = est.of_chain(c, v.hparams)
            running.append(Running(c.id, v.label, c.stage if cur is not None else None, elapsed, tr, ev))
        for c in r.queued_chains():
            v = variants[c.variant_id]
            tr, ev = est.of_chain(c, v.hparams)
            queued.append((c, Queued(c.id, v.label, tr, ev)))
    skips: dict[int, str] = {}
    ordered = [q for _, q in queued]
    planned_by = "queue order"
    if plan and plan.get("policy") == "adaptive":
        pos = {int(cid): i for i, cid in enumerate(plan.get("order", []))}
        skips = {int(k): v for k, v in (plan.get("skips") or {}).items()}
        first = [q for q in ordered if q.chain_id in skips]
        rest = sorted((q for q in ordered if q.chain_id not in skips),
                      key=lambda q: (q.chain_id not in pos, pos.get(q.chain_id, 0)))
        ordered = first + rest
        planned_by = "adaptive plan"
    entries = project(usable_s, running, ordered, skips)
    fits = [e for e in entries if e.fits and e.end_in_s is not None]
    return {
        "policy": (plan or {}).get("policy") or pl.get("policy") or "fifo",
        "futility": (plan or {}).get("futility", pl.get("futility", False)),
        "auto_repeat": (plan or {}).get("auto_repeat", pl.get("auto_repeat", False)),
        "plan_at": (plan or {}).get("at"),
        "order": planned_by,
        "usable_seconds": None if usable_s is None else round(usable_s, 1),
        "timeline": [e.to_json() for e in entries],
        "will_not_fit": [e.chain_id for e in entries if not e.fits],
        "projected_end_in_s": round(max((e.end_in_s for e in fits), default=0.0), 1),
    }
