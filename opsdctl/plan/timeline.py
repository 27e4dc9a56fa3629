"""The projected timeline: when each queued chain would start and end, and which will not fit.

`project` is the pure part; `planner_status` is the "planner" section of `opsdctl status`: the
queue in the order the worker's own gate decides (the statistics are imported only for the
adaptive policy, which needs them).

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

from opsdctl.plan.admission import admit_chain
from opsdctl.plan.durations import Estimate


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


# --- `opsdctl status`: the projected timeline ---------------------------------------------


def planner_status(cfg, reader, usable_s: Optional[float], worker_running: bool = False) -> dict:
    """The planner part of the status document: settings, the order the worker will follow (the
    worker's own decision, PlannerGate.order, taken without queuing anything), where auto-repeat
    will insert its chains, the projected timeline of the running and queued chains, and why the
    worker would idle with budget left. With a worker running, its settings (its command-line
    flags) as it saved them; else the config's, which the next `opsdctl worker` uses."""
    from dataclasses import replace

    from opsdctl.plan.gate import chain_info
    from opsdctl.plan.planner import PlannerGate, settings_from_config
    from opsdctl.plan.store_facts import StoreFacts, load_plan
    from opsdctl.store.states import State
    from opsdctl.store.values import utcnow

    plan = load_plan(reader) if worker_running else None
    settings = settings_from_config(cfg)
    if plan:
        settings = replace(settings, **{k: plan[k] for k in WORKER_SETTINGS if k in plan})
    gate = PlannerGate(settings, StoreFacts(cfg, reader=reader), budget_left=lambda: usable_s)
    gate.extra_queued = int((plan or {}).get("auto_queued") or 0)
    with reader.snapshot() as r:
        variants = {v.id: v for v in r.all_variants()}
        queued = [chain_info(c, variants[c.variant_id]) for c in r.queued_chains()]
        running_rows = [(c, r.stages_of(c.id)) for c in r.chains_in_state(State.RUNNING)]
    ordered = gate.order(queued, dry_run=True)
    running = []
    for c, rows in running_rows:
        v = variants[c.variant_id]
        cur = next((st for st in reversed(rows) if st.name == c.stage and st.state == "running"), None)
        elapsed = (utcnow() - cur.started_at).total_seconds() if cur is not None else 0.0
        tr, ev = gate.estimator.of_chain(c, v.hparams)
        running.append(Running(c.id, v.label, c.stage if cur is not None else None, elapsed, tr, ev))
    entries = project(usable_s, running, [Queued(q.chain_id, q.variant, *gate.chain_estimate(q)) for q in ordered],
                      gate.plan.skips)
    fits = [e for e in entries if e.fits and e.end_in_s is not None]
    auto = None
    if gate.auto_next is not None:
        first = bool(queued) and settings.auto_repeat_first
        auto = {"variant": gate.auto_next.variant, "why": gate.auto_next.why,
                "action": "re-eval" if gate.auto_next.reeval else "repeat",
                "at": "before the queued chains (auto_repeat_first)" if first else "after the queued chains"}
    elif settings.auto_repeat and settings.policy != "fifo" and queued and gate.idle_note is None:
        auto = {"variant": None, "why": "picked when the queued chains have run, from their scores", "action": None,
                "at": "after the queued chains"}
    return {
        "policy": settings.policy,
        "futility": settings.futility,
        "auto_repeat": settings.auto_repeat,
        "auto_repeat_max": settings.auto_repeat_max,
        "auto_repeat_first": settings.auto_repeat_first,
        "objective": settings.objective,
        "auto_repeat_next": auto,
        "idle": gate.idle_note,
        "plan_at": (plan or {}).get("at"),
        "order": "adaptive plan" if settings.policy == "adaptive" else "queue order",
        "usable_seconds": None if usable_s is None else round(usable_s, 1),
        "timeline": [e.to_json() for e in entries],
        "will_not_fit": [e.chain_id for e in entries if not e.fits],
        "projected_end_in_s": round(max((e.end_in_s for e in fits), default=0.0), 1),
    }


# the worker's planner settings that its flags may change, saved with its plan (PlannerGate._save_plan)
WORKER_SETTINGS = ("policy", "futility", "auto_repeat", "auto_repeat_max", "auto_repeat_first", "try_every_variant",
                   "objective")
