"""`opsdctl status`: what runs now, what is queued (in run order), what finished, time left.

`gather_status` returns plain data (the `--json` document); the CLI renders it with rich.
JSON shape (contract): {"budget": {...}, "worker": {...}, "chains": [{"chain_id", "variant",
"state", "stage", "score", "reason", "started_at", "finished_at", ...}]}: running chains first,
then queued ones in run order, then finished ones, newest first. "planner" (opsdctl.timeline:
policy, the projected timeline, chains that will not fit) and "gpus" (opsdctl.gpus: inventory
with the processes holding each GPU) complete it.
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import Optional

from opsdctl import procs
from opsdctl.budget import CLOCK_KEY, budget_now
from opsdctl.config import Config
from opsdctl.models import Chain, Score, Stage, Variant, WorkerRun, utcnow
from opsdctl.states import State
from opsdctl.store import (
    Store,
    all_variants,
    chains_in_state,
    finished_chains,
    get_meta,
    latest_worker,
    queued_chains,
    score_of,
    stages_of,
)


def iso(t: Optional[dt.datetime]) -> Optional[str]:
    if t is None:
        return None
    return t.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def seconds_since(t: Optional[dt.datetime]) -> Optional[float]:
    if t is None:
        return None
    return max(0.0, (utcnow() - t).total_seconds())


def clock_start(store: Store) -> Optional[float]:
    with store.read() as s:
        value = get_meta(s, CLOCK_KEY)
    return float(value) if value else None


def worker_view(w: Optional[WorkerRun]) -> dict:
    if w is None:
        return {"state": "none", "pid": None, "text": "no worker has run on this store"}
    alive = w.stopped_at is None and (
        w.host != socket.gethostname() or procs.process_alive(w.pid, w.create_time)
    )
    base = {"pid": w.pid, "host": w.host, "started_at": iso(w.started_at), "heartbeat_at": iso(w.heartbeat_at),
            "activity": w.activity, "drain": w.drain}
    if alive:
        return {**base, "state": "running", "text": f"pid {w.pid} running ({w.activity or 'working'})"}
    if w.stopped_at is None:
        return {**base, "state": "dead",
                "text": f"pid {w.pid} died without stopping cleanly; the next worker re-queues what it ran"}
    return {**base, "state": "stopped", "stopped_at": iso(w.stopped_at), "exit_reason": w.exit_reason,
            "text": f"not running (last: pid {w.pid}, {w.exit_reason or 'stopped'})"}


def chain_view(s, chain: Chain, variant: Variant, with_stages: bool = True) -> dict:
    score: Optional[Score] = score_of(s, chain.id) if chain.state not in (State.QUEUED.value,) else None
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
        "partial": score.partial if score else None,
        "score_source": score.source if score else None,
    }
    if chain.started_at is not None:
        end = chain.finished_at or utcnow()
        out["elapsed_seconds"] = round((end - chain.started_at).total_seconds(), 1)
    if with_stages and chain.state != State.QUEUED.value:
        stage_rows = stages_of(s, chain.id)
        out["stages"] = [stage_view(st) for st in stage_rows]
        current = next((st for st in reversed(stage_rows) if st.name == chain.stage), None)
        if current is not None:
            out["progress"] = current.progress
            out["log"] = current.log_path
            if current.state == "running":
                out["stage_elapsed_seconds"] = round(seconds_since(current.started_at) or 0.0, 1)
    return out


def stage_view(st: Stage) -> dict:
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
    }


def gather_status(cfg: Config, store: Store, recent: Optional[int] = 10) -> dict:
    started = clock_start(store) if cfg.budget.kind == "hours" else None
    budget = budget_now(cfg.budget, started)
    with store.read() as s:
        worker = worker_view(latest_worker(s))
        running = chains_in_state(s, State.RUNNING)
        queued = queued_chains(s)
        finished = finished_chains(s, recent)
        variants = {v.id: v for v in all_variants(s)}
        chains = [chain_view(s, c, variants[c.variant_id]) for c in running]
        for c in chains:
            if worker["state"] != "running":
                c["note"] = "its worker is gone; the next worker start marks it interrupted and re-queues it"
        chains += [chain_view(s, c, variants[c.variant_id], with_stages=False) for c in queued]
        chains += [chain_view(s, c, variants[c.variant_id]) for c in finished]
    from opsdctl.gpus import gpus_status
    from opsdctl.timeline import planner_status

    return {"budget": {**budget.to_json(), "text": budget.text()}, "worker": worker, "chains": chains,
            "planner": planner_status(cfg, store, budget.usable_seconds), "gpus": gpus_status(cfg),
            "generated_at": iso(utcnow()), "store": store.safe_url()}
