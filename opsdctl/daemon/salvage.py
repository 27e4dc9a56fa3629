"""Salvage finished work when a chain is recovered: never re-run what already completed.

A worker that dies (or fails) mid-chain leaves finished work behind (in 30 crash rounds, 14
trained checkpoints and 6 finished evaluations), so a recovered chain is looked at first:
- its evaluation finished (a valid result.json or FINAL line, the stage contract's result):
  the score is recorded and the chain succeeds, nothing re-runs;
- its train stage left a complete checkpoint: the chain is interrupted and re-queued as an
  eval-only chain of that checkpoint, trained_by the old chain;
- otherwise it is re-queued whole.
A checkpoint is complete when its train stage succeeded, or when it exists and the training
had finished: the stage had exited 0 (recorded before the worker reads its output, so a worker
killed while reading a huge log does not train again), train_result.json was written, or the log
has the Trainer's final `{'train_runtime': ...}` line (both come after the last checkpoint is saved). In the second case
the worker never ran the effective-config check: it runs here, and a log that contradicts the
recipe is not salvaged (the chain trains again, and fails there with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from opsdctl.config import Config
from opsdctl.fsutil import read_tail
from opsdctl.recipes.profiles import PROFILES
from opsdctl.contract import eval_request, results
from opsdctl.daemon import frozen_stages, stages
from opsdctl.contract.effective_config import MISMATCH, check_log
from opsdctl.store.chain_copy import interrupt_and_requeue
from opsdctl.contract.score_row import score_row
from opsdctl.store.engine import stages_of, train_stats_of
from opsdctl.store.models import Chain, Stage, TrainStats, Variant, utcnow
from opsdctl.store.states import Outcome, State, transition

FINAL_LOG_BYTES = 1 << 20  # the Trainer's last lines, where train_runtime is


@dataclass
class Found:
    checkpoint: Optional[str] = None  # a complete checkpoint the chain's own train stage left
    checkpoint_why: str = ""
    result: Optional[results.EvalResult] = None  # a complete evaluation
    eval_row: Optional[Stage] = None


def inspect(session, cfg: Config, chain: Chain) -> Found:
    rows = stages_of(session, chain.id)
    train = next((r for r in reversed(rows) if r.name == "train"), None)
    evaluation = next((r for r in reversed(rows) if r.name == "eval"), None)
    found = Found()
    if not chain.eval_only and train is not None:
        found.checkpoint, found.checkpoint_why = _complete_checkpoint(session, cfg, chain, train)
    if evaluation is not None and (chain.eval_only or found.checkpoint):
        found.result = _complete_result(evaluation, chain)
        found.eval_row = evaluation if found.result is not None else None
    return found


def _complete_checkpoint(session, cfg: Config, chain: Chain, row: Stage) -> tuple[Optional[str], str]:
    if row.state == State.SUCCEEDED.value:
        if row.checkpoint and Path(row.checkpoint).exists():
            return row.checkpoint, "its train stage had succeeded"
        return None, ""
    if not row.stage_dir:
        return None, ""
    path = _expected_checkpoint(session, cfg, chain, row)
    if path is None or not path.exists():
        return None, ""
    stage_dir = Path(row.stage_dir)
    tail = read_tail(row.log_path, FINAL_LOG_BYTES) if row.log_path else ""
    if row.exit_code == 0:
        why = "its train stage had exited 0"
    elif (stage_dir / "train_result.json").is_file():
        why = "its training had finished (train_result.json)"
    elif "'train_runtime'" in tail:
        why = "its training had finished (the Trainer's final train_runtime line)"
    else:
        return None, ""
    if _contradicts_recipe(session, cfg, chain, row):
        return None, ""
    return str(path), why


def _contradicts_recipe(session, cfg: Config, chain: Chain, row: Stage) -> bool:
    variant = session.get(Variant, chain.variant_id)
    profile = PROFILES.get(chain.profile)
    try:
        check = check_log(read_tail(row.log_path, results.STATS_TAIL_BYTES) if row.log_path else "", variant.hparams, variant.method,
                          max_steps=profile.max_steps if profile else None,
                          lr_scale=profile.learning_rate_scale if profile else 1.0,
                          expect=frozen_stages.settings(chain.stage_spec, cfg).expect)
    except Exception:  # a bug in the check must not throw a good checkpoint away
        return False
    if check.status != MISMATCH:
        row.recipe_check = check.to_dict()
    return check.status == MISMATCH


def _expected_checkpoint(session, cfg: Config, chain: Chain, row: Stage) -> Optional[Path]:
    """The train stage's checkpoint template, rendered as the stage saw it."""
    variant = session.get(Variant, chain.variant_id)
    run_dir = Path(row.stage_dir).parent
    gpus = [g for g in (row.gpus or "").split(",") if g]
    values = {
        "chain_id": chain.id, "variant": variant.label if variant else "", "seed": chain.seed, "run_dir": run_dir,
        "stage_dir": row.stage_dir, "code_dir": row.cwd or chain.code_dir, "recipe_env": run_dir / "recipe.env",
        "recipe_json": run_dir / "recipe.json", "gpus": row.gpus or "", "num_gpus": len(gpus),
        "python": stages.python_executable(), "profile": chain.profile,
        **eval_request.placeholders(chain),
    }
    try:
        path = Path(stages.render(frozen_stages.settings(chain.stage_spec, cfg).checkpoint, values, quote=False))
    except Exception:  # a template the config no longer renders: nothing to salvage
        return None
    return path if path.is_absolute() else Path(values["code_dir"]) / path


def _complete_result(row: Stage, chain: Chain) -> Optional[results.EvalResult]:
    if not row.stage_dir or not row.log_path:
        return None
    try:
        result = results.read_eval_result(Path(row.stage_dir), Path(row.log_path))
    except (results.ResultError, OSError, ValueError):
        return None  # malformed or unreadable: the evaluation runs again
    if result is not None:
        eval_request.flag_result(result, chain)
    return result


def recover_chain(session, cfg: Config, chain: Chain, reason: str, report: Callable[[str], None]) -> Optional[int]:
    """A `running` chain whose worker is gone: succeeded with its finished evaluation, or
    interrupted and re-queued (eval-only from its complete checkpoint, else whole). Returns the
    re-queued chain's id (None when it succeeded or had already ended)."""
    found = inspect(session, cfg, chain)
    if found.result is not None:
        done = Outcome(State.SUCCEEDED, f"recovered after {reason}: its evaluation had finished ({found.result.source})")
        row = session.get(Stage, found.eval_row.id)
        row.state, row.reason = done.stage_value, f"salvaged after {reason}: its result was complete"
        row.finished_at = row.finished_at or utcnow()
        if transition(session, chain.id, State.RUNNING, done):
            session.add(score_row(chain.id, found.result, None))
            report(f"chain {chain.id}: salvaged its finished evaluation ({found.result.source}, avg@{found.result.k} = "
                   f"{found.result.avg_at_k:.2f}); succeeded without re-running anything")
        return None
    if found.checkpoint is None:
        fresh = interrupt_and_requeue(session, chain, reason, requeue=True)
        if fresh is not None:
            report(f"chain {chain.id}: interrupted ({reason}); re-queued as chain {fresh.id}")
        return fresh.id if fresh is not None else None
    fresh = interrupt_and_requeue(session, chain, f"{reason}; its checkpoint was complete", requeue=True)
    if fresh is None:
        return None
    fresh.eval_only, fresh.checkpoint, fresh.trained_by = True, found.checkpoint, chain.trained_by or chain.id
    _carry_train_stats(session, chain, fresh)
    report(f"chain {chain.id}: interrupted ({reason}); salvaged its checkpoint {found.checkpoint} "
           f"({found.checkpoint_why}): re-queued as chain {fresh.id} to evaluate it, without training again")
    return fresh.id


def _carry_train_stats(session, old: Chain, fresh: Chain) -> None:
    """The eval-only chain shows the training that made its checkpoint."""
    stats = train_stats_of(session, old.id)
    if stats is not None:
        data = {k: getattr(stats, k) for k in results.TrainSummary.__dataclass_fields__}
    else:
        train = next((r for r in reversed(stages_of(session, old.id)) if r.name == "train"), None)
        try:
            summary = results.read_train_summary(Path(train.stage_dir), Path(train.log_path)) if train else None
        except Exception:  # statistics are a bonus
            summary = None
        if summary is None:
            return
        data = summary.to_dict()
    session.add(TrainStats(chain_id=fresh.id, **data))
