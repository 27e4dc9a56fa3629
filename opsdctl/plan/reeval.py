"""Re-evaluations: fresh eval samples of a checkpoint that already has a full score.

A re-eval runs the training chain's frozen eval command on its checkpoint again, as the next
draw (Chain.eval_draw: 1, 2, ...); the stage gets OPSD_EVAL_DRAW and our evaluator seeds its
samples from it, and compare pools the evals of one training into one run (opsdctl.stats.reevals).
It cuts the eval-sampling part of that run's noise, nothing else, at the price of one eval.

Who may be re-evaluated (`refusal`, the one rule `requeue --reeval`, `advise` and the adaptive
worker apply): a checkpoint this store trained, still on disk, with a full score, evaluated by
our evaluator (`python -m eval`); a user's own eval script cannot be told to draw fresh samples,
so a second eval of it would repeat the first. `targets` names, per candidate, the training to
re-evaluate next: the one with the fewest evals (the latest on a tie), whose next eval halves the
most noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from opsdctl.config import BUILTIN_EVALUATOR
from opsdctl.store import queries


@dataclass(frozen=True)
class Target:
    """The training a re-eval of candidate `label` evaluates again, and how many evals it has."""

    label: str
    train_id: int
    evals: int


def refusal(train_id: int, eval_command: str, checkpoint: Optional[str]) -> Optional[str]:
    """Why the checkpoint of chain `train_id` cannot be re-evaluated (None: it can)."""
    if not BUILTIN_EVALUATOR.match(eval_command or ""):
        return (f"chain {train_id} is evaluated by your own command ({eval_command!r}), which cannot be told to draw "
                f"fresh samples, so a second eval would repeat the first; queue another training of it instead")
    if not checkpoint or not Path(checkpoint).is_dir():
        return (f"chain {train_id}: its checkpoint {checkpoint or '(none recorded)'} is gone (removed by hand or by "
                f"`opsdctl gc`?); queue another training of it instead")
    return None


def eval_command_of(spec: Optional[Mapping], cfg) -> str:
    """The eval command a chain froze when queued (the config's for a chain queued before)."""
    return ((spec or {}).get("eval") or {}).get("command") or cfg.stages["eval"].command


def ok_training(reader, cfg) -> Callable[[int], bool]:
    """train chain id -> whether its checkpoint may be re-evaluated (`refusal` says no): one query
    for every succeeded training, the checkpoint's directory looked at only when asked."""
    rows = {cid: (spec, checkpoint) for cid, spec, checkpoint in reader.tuples(queries.SUCCEEDED_TRAININGS)}

    def ok(train_id: int) -> bool:
        spec, checkpoint = rows.get(train_id, (None, None))
        return train_id in rows and refusal(train_id, eval_command_of(spec, cfg), checkpoint) is None

    return ok


def targets(reader, cfg, runs: Sequence) -> dict[str, Target]:
    """`pick` over the store: what `advise` and the adaptive worker may re-evaluate now."""
    return pick(runs, ok_training(reader, cfg))


def pick(runs: Sequence, ok: Callable[[int], bool]) -> dict[str, Target]:
    """Per candidate (RunRecord.key), the training to re-evaluate: among full runs whose training
    `ok` allows, the one with the fewest evals, the latest on a tie. Pure but for `ok`, asked in
    that order until it allows one (a store's check looks at the disk). `runs` are compare's
    records (one per evaluation, with train_id and draw)."""
    evals: dict[tuple[str, int], set] = {}
    for r in runs:
        if not r.partial and r.train_id is not None:
            evals.setdefault((r.key, r.train_id), set()).add(r.draw)
    out: dict[str, Target] = {}
    for label, train_id, n in sorted(((label, t, len(d)) for (label, t), d in evals.items()),
                                     key=lambda x: (x[0], x[2], -x[1])):
        if label not in out and ok(train_id):
            out[label] = Target(label, train_id, n)
    return out


def queue(store, cfg, chain_id: int, *, priority: Optional[int] = None, reason: Optional[str] = None):
    """Queue the next draw of the checkpoint chain `chain_id` trained (or, for an eval-only chain,
    evaluated), as opsdctl.store.chain_rows.reeval writes it under `refusal`; returns the (Chain,
    Variant) written. Refused in one line (UserError) when `refusal` says so, or when the
    checkpoint has no full score yet (its first eval is what `requeue --eval-only` runs)."""
    from opsdctl.store import chain_rows

    def refuse(train_id: int, spec: Optional[Mapping], checkpoint: Optional[str]) -> Optional[str]:
        return refusal(train_id, eval_command_of(spec, cfg), checkpoint)

    return chain_rows.reeval(store, chain_id, refuse, priority=priority, reason=reason)
