"""What a stage leaves in the store: its row's end, its training statistics, its GPU usage, the
recipe check of its log, a stopped evaluation's partial score, and the chain's end state (one
guarded transition: a concurrent cancel wins)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from opsdctl.contract import log_metrics, results
from opsdctl.contract.effective_config import RecipeCheck, check_log
from opsdctl.contract.score_row import score_row
from opsdctl.errors import one_line
from opsdctl.fsutil import read_tail
from opsdctl.recipes.profiles import PROFILES
from opsdctl.store.models import Chain, Score, Stage, TrainStats, utcnow
from opsdctl.store.states import Outcome, State, transition


def finish_stage(store, stage_id: int, outcome: Outcome, seconds: float, watch=None) -> Outcome:
    """Write the stage row's end from its outcome; return the outcome."""
    with store.write() as s:
        row = s.get(Stage, stage_id)
        row.state = outcome.stage_value
        row.exit_code = outcome.exit_code
        row.finished_at = utcnow()
        row.seconds = round(seconds, 3)
        row.reason = one_line(outcome.reason) if outcome.reason else outcome.reason  # it may quote the stage's log
        if outcome.checkpoint is not None:
            row.checkpoint = outcome.checkpoint
        if watch is not None:
            row.pids = sorted(watch.pids | ({row.pid} if row.pid else set()))
            p = results.progress_from_record(watch.last_progress) if watch.last_progress else None
            if p is not None:
                p.source = watch.last_progress.get("source", p.source)
                row.progress = p.to_dict()
    return outcome


def end_chain(ctx, chain_id: int, outcome: Outcome, score=None) -> State:
    """Move the chain to its outcome (guarded: a concurrent cancel wins); its state after."""
    with ctx.store.write() as s:
        moved = transition(s, chain_id, State.RUNNING, outcome)
        if moved and score is not None:
            s.add(score)
        current = State(s.get(Chain, chain_id).state)
    if moved and not outcome.ok:
        tail = f": {outcome.reason}" if outcome.reason else ""
        ctx.report(f"chain {chain_id}: {outcome.state}{tail}")
    return current


def report_cancel(ctx, chain_id: int, where: str) -> None:
    """Say in the worker log that someone else (`opsdctl cancel`) ended the chain."""
    with ctx.store.read() as s:
        chain = s.get(Chain, chain_id)
        state, reason = chain.state, chain.reason
    ctx.report(f"chain {chain_id}: {reason or state} {where}")


def train_stats(ctx, chain_id: int, stage: str, stage_dir: Path, log_path: Path) -> None:
    if stage != "train":
        return
    try:
        summary = results.read_train_summary(stage_dir, log_path)
        declared = ctx.cfg.stages["train"].metrics  # [stages.train.metrics]
        if declared and log_path.is_file():
            summary = log_metrics.apply(summary, read_tail(log_path, results.STATS_TAIL_BYTES), declared)
    except Exception as exc:  # statistics are a bonus; never fail a chain over them
        ctx.report(f"chain {chain_id}: could not read training statistics: {exc}")
        return
    if summary is None:
        return
    with ctx.store.write() as s:
        s.add(TrainStats(chain_id=chain_id, **summary.to_dict()))


def gpu_usage(store, stage_id: int, sampler) -> None:
    usage = sampler.stop() if sampler is not None else None
    if usage is None:
        return
    with store.write() as s:
        row = s.get(Stage, stage_id)
        row.gpu_peak_mib, row.gpu_util_pct, row.gpu = usage.peak_mib, usage.util_pct, usage.to_json()


def recipe_check(ctx, settings, chain, variant, stage_id: int, log_path: Path) -> RecipeCheck:
    """Did the train log run the variant's recipe (contract/effective_config.py); recorded on the row."""
    profile = PROFILES.get(chain.profile)
    try:
        check = check_log(read_tail(log_path, results.STATS_TAIL_BYTES), variant.hparams, variant.method,
                          max_steps=profile.max_steps if profile else None,
                          lr_scale=profile.learning_rate_scale if profile else 1.0, expect=settings.expect)
    except Exception as exc:  # a bug in the check must not fail a good run
        check = RecipeCheck(unchecked=[f"the check itself failed: {type(exc).__name__}: {exc}"])
    with ctx.store.write() as s:
        s.get(Stage, stage_id).recipe_check = check.to_dict()
    ctx.report(f"chain {chain.id}: {check.summary()}")
    return check


def partial_score(chain_id: int, stage_dir: Path, watch) -> Optional[Score]:
    """A stopped evaluation's score so far: its result.json, else its last per-problem record."""
    result = None
    try:
        if (stage_dir / "result.json").is_file():
            result = results.read_result_json(stage_dir / "result.json")
    except results.ResultError:
        result = None
    if result is None and watch.last_problems_record is not None:
        result = results.partial_from_progress(watch.last_problems_record)
    if result is None:
        return None
    result.partial = True
    return score_row(chain_id, result, None)


def last_line(log_path: Path) -> str:
    lines = [l.strip() for l in read_tail(log_path, 8192).replace("\r", "\n").splitlines() if l.strip()]
    if not lines:
        return " (empty log)"
    return f"; last log line: {lines[-1][:200]}"
