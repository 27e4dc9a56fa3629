"""The status document: what runs now, what is queued (in the worker's run order), what finished,
the time left; `opsdctl status` renders it, the dashboard's session page too.

JSON shape (contract): {"budget": {...}, "worker": {...}, "chains": [{"chain_id", "variant",
"state", "stage", "score", "reason", "started_at", "finished_at", ...}]}: running chains first,
then queued ones in run order (each with "stage_settings_differ": the stage settings, e.g.
"[stages.eval] command", that it froze when queued and opsdctl.toml no longer holds), then
finished ones, newest first. "planner" (opsdctl.plan.planner_status: policy, the projected
timeline, chains that will not fit) and "gpus" (opsdctl.daemon.gpu_probe: inventory with the
processes holding each GPU) complete it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from opsdctl.config import Config
    from opsdctl.store.reader import Reader


def gather_status(cfg: Config, reader: Reader, recent: Optional[int] = 10) -> dict:
    """The status document, read in one snapshot of the store: the time left and the worker
    first (the planner plans with the deadline a running worker keeps), then the chains, then the
    planner's dry run of the queue (the worker's own order), then the GPUs and the bet."""
    from opsdctl.client.worker_view import worker_view
    from opsdctl.daemon.auto_export import current_bet
    from opsdctl.daemon.gpu_probe import gpus_status
    from opsdctl.plan.budget_keeper import hold_reason
    from opsdctl.plan.planner_status import planner_status
    from opsdctl.plan.read_context import read_context
    from opsdctl.store.values import iso, utcnow

    with reader.snapshot() as r:
        worker = worker_view(r.latest_worker())
        running = worker["state"] == "running"
        ctx = read_context(cfg, r)
        ctx = ctx.with_budget(_planning_budget(ctx, running))
        chains = _chains(cfg, r, recent, running)
        planner = planner_status(ctx, worker_running=running)
        bet = current_bet(r)  # the bet, as the worker keeps it current: what `export-recipe --leader` submits now
        export = export_view(cfg, r, ctx.budget, bet)
    _in_run_order(chains, planner)
    _running_details(chains, planner)
    budget = ctx.budget
    return {"budget": {**budget.to_json(), "text": budget.text(), "hold": hold_reason(budget)},
            "worker": worker, "chains": chains, "planner": planner, "gpus": gpus_status(cfg),
            "export": export, "bet": bet, "generated_at": iso(utcnow()), "store": reader.safe_url}


def _planning_budget(ctx, worker_running: bool):
    """The budget status shows and plans with: when its source cannot be read, the deadline a
    running worker keeps (opsdctl.plan.budget_keeper)."""
    from opsdctl.plan.budget_keeper import LAST_DEADLINE_KEY, with_kept_deadline

    budget = ctx.budget
    if budget.error and worker_running:
        kept = ctx.reader.get_meta(LAST_DEADLINE_KEY)
        budget = with_kept_deadline(budget, float(kept) if kept else None, ctx.now)
    return budget


def _chains(cfg: Config, r: Reader, recent: Optional[int], worker_running: bool) -> list[dict]:
    """Running chains, then queued ones (as the store lists them; _in_run_order sorts them), then
    the `recent` finished ones, newest first (None: every one)."""
    from opsdctl.daemon import frozen_stages
    from opsdctl.store.states import State

    variants = {v.id: v for v in r.all_variants()}
    chains = [chain_view(r, c, variants[c.variant_id]) for c in r.chains_in_state(State.RUNNING)]
    for c in chains:
        if not worker_running:
            c["note"] = "its worker is gone; the next worker start marks it interrupted and re-queues it"
    for c in r.queued_chains():
        view = chain_view(r, c, variants[c.variant_id], with_stages=False)
        # Frozen when queued: what of opsdctl.toml as it is now this chain will not run.
        view["stage_settings_differ"] = frozen_stages.differences(c.stage_spec, cfg)
        chains.append(view)
    chains += [chain_view(r, c, variants[c.variant_id]) for c in r.finished_chains(recent)]
    return chains


def chain_view(r: Reader, chain, variant, with_stages: bool = True) -> dict:
    """One chain of the document; `chain`, `variant`: the reader's records (or model rows)."""
    from opsdctl.recipes import partial
    from opsdctl.store.states import State
    from opsdctl.store.values import iso, seconds_since, utcnow

    score = r.score_of(chain.id) if chain.state not in (State.QUEUED.value,) else None
    out = {
        "chain_id": chain.id,
        "variant": variant.label,
        "state": chain.state,
        "stage": chain.stage,
        "score": round(score.avg_at_k, 4) if score else None,
        "reason": chain.reason,
        "started_at": iso(chain.started_at),
        "finished_at": iso(chain.finished_at),
        "queued_at": iso(chain.queued_at),
        "seed": chain.seed,
        "repeat": chain.repeat,
        "priority": chain.priority,
        "requeued_from": chain.requeued_from,
        "k": score.k if score else None,
        "n_problems": score.n_problems if score else None,
        # partial: queued `--partial` (known before it runs) or flagged by its evaluator
        "partial": partial.run_is_partial(chain, score),
        "eval": partial.of_chain(chain).to_json(),  # {"num_problems", "k"} asked for; None = full protocol
        "eval_only": bool(chain.eval_only),
        "checkpoint": chain.checkpoint,
        "trained_by": chain.trained_by,
        "eval_draw": int(chain.eval_draw or 0),  # a re-eval's fresh samples: 1, 2, ... (0: a first eval)
        "score_source": score.source if score else None,
    }
    if chain.started_at is not None:
        end = chain.finished_at or utcnow()
        out["elapsed_seconds"] = round((end - chain.started_at).total_seconds(), 1)
    if with_stages and chain.state != State.QUEUED.value:
        stage_rows = r.stages_of(chain.id)
        out["stages"] = [stage_view(st) for st in stage_rows]
        current = next((st for st in reversed(stage_rows) if st.name == chain.stage), None)
        if current is not None:
            out["progress"] = current.progress
            out["log"] = current.log_path
            if current.state == "running":
                out["stage_elapsed_seconds"] = round(seconds_since(current.started_at) or 0.0, 1)
    return out


def stage_view(st) -> dict:
    from opsdctl.store.values import iso

    return {
        "name": st.name,
        "state": st.state,
        "pid": st.pid,
        "gpus": st.gpus,
        "started_at": iso(st.started_at),
        "finished_at": iso(st.finished_at),
        "seconds": st.seconds,
        "estimate_seconds": st.estimate_seconds,
        "exit_code": st.exit_code,
        "checkpoint": st.checkpoint,
        "log": st.log_path,
        "progress": st.progress,
        "reason": st.reason,
        "gpu_peak_mib": st.gpu_peak_mib,
        "gpu_util_pct": st.gpu_util_pct,
    }


def export_view(cfg: Config, reader: Reader, budget, bet: Optional[dict]) -> Optional[dict]:
    """[export]: where the worker writes the best recipe.env, whether it has started, and what it
    wrote last (leader, its forecast, verdict, when), and `bet`, the one the worker keeps current
    before then; None when [export] path is unset. (status shows the worker's figures: computing
    a forecast here would import scipy, which status must not.)"""
    from opsdctl.config import export_path
    from opsdctl.daemon.auto_export import due, last_written

    sec = cfg.section("export")
    if not sec.get("path"):
        return None
    path = export_path(cfg)
    active, why = due(budget, float(sec.get("minutes_before_deadline", 10.0)))
    last = last_written(reader)
    if last is not None:
        last = {k: v for k, v in last.items() if k != "key"}
    return {"path": str(path), "active": active, "when": why, "last": last, "bet": bet}


def _in_run_order(chains: list[dict], planner: dict) -> None:
    """Queued chains in the order the worker will try them (the planner's timeline: skips first,
    as the worker marks them before it starts the next chain)."""
    from opsdctl.store.states import State

    pos = {e["chain_id"]: i for i, e in enumerate(planner["timeline"]) if e["state"] == "queued"}
    queued = sorted((c for c in chains if c["state"] == State.QUEUED.value), key=lambda c: pos.get(c["chain_id"], len(pos)))
    at = [i for i, c in enumerate(chains) if c["state"] == State.QUEUED.value]
    for i, c in zip(at, queued):
        chains[i] = c


def _running_details(chains: list[dict], planner: dict) -> None:
    """Running chains get their projected end (from the timeline) and, when their stage has
    made no progress for 3x its usual interval, `stalled` = {"for_s", "interval_s"}."""
    from opsdctl.store.values import utcnow
    from opsdctl.daemon.progress_clock import STORE_LAG_S, stalled

    ends = {e["chain_id"]: e["end_in_s"] for e in planner.get("timeline", []) if e["state"] == "running"}
    now = utcnow()
    for c in chains:
        if c["state"] != "running":
            continue
        c["projected_end_in_s"] = ends.get(c["chain_id"])
        c["stalled"] = stalled(c.get("progress"), now, STORE_LAG_S) if c.get("stage_elapsed_seconds") is not None else None


