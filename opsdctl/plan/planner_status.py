"""The "planner" section of `opsdctl status`: the worker's settings, the queue in the order the
worker's own gate decides (PlannerGate.order as a dry run: the statistics are imported only for
the adaptive policy, which needs them), where auto-repeat will insert its chains, the projected
timeline of the running and queued chains (opsdctl.plan.timeline) and each GPU slot's, and why
the worker would idle with budget left."""

from __future__ import annotations

from opsdctl.plan.read_context import ReadContext
from opsdctl.plan.timeline import Queued, project, slot_timelines


def planner_status(ctx: ReadContext, worker_running: bool = False) -> dict:
    """The planner part of the status document: settings, the order the worker will follow (the
    worker's own decision, PlannerGate.order, taken without queuing anything), where auto-repeat
    will insert its chains, the projected timeline of the running and queued chains, and why the
    worker would idle with budget left. With a worker running, its settings (its command-line
    flags) as it saved them; else the config's, which the next `opsdctl worker` uses. `ctx`: the
    command's read context: its usable time, its layout (the config's and the worker's saved plan:
    the planner never probes a GPU), its baseline and duration history."""
    from dataclasses import replace

    from opsdctl.plan.gate import chain_info
    from opsdctl.plan.planner import PlannerGate, settings_from_config
    from opsdctl.plan.store_facts import StoreFacts, load_plan

    cfg, reader, usable_s = ctx.cfg, ctx.reader, ctx.budget.usable_seconds
    plan = load_plan(reader) if worker_running else None
    settings = settings_from_config(cfg, ctx.layout)
    if plan:
        settings = replace(settings, **{k: plan[k] for k in WORKER_SETTINGS if k in plan})
    gate = PlannerGate(settings, StoreFacts(cfg, reader=reader, context=ctx), budget_left=lambda: usable_s)
    gate.extra_queued = int((plan or {}).get("auto_queued") or 0)
    with reader.snapshot() as r:
        variants = {v.id: v for v in r.all_variants()}
        queued = [chain_info(c, variants[c.variant_id]) for c in r.queued_chains()]
    ordered = gate.order(queued, dry_run=True)
    entries = project(usable_s, gate.running_now(), [Queued(q.chain_id, q.variant, *gate.chain_estimate(q))
                                                     for q in ordered], gate.plan.skips, settings.layout)
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
        "layout": settings.layout.describe(),
        "slots": slot_timelines(entries, settings.layout),
        "will_not_fit": [e.chain_id for e in entries if not e.fits],
        "projected_end_in_s": round(max((e.end_in_s for e in fits), default=0.0), 1),
    }


# the worker's planner settings that its flags may change, saved with its plan (PlannerGate._save_plan)
WORKER_SETTINGS = ("policy", "futility", "auto_repeat", "auto_repeat_max", "auto_repeat_first", "try_every_variant",
                   "objective")
