"""One training, one run: the full evaluations of one checkpoint become one record.

A checkpoint may be evaluated more than once: a re-evaluation (`opsdctl requeue CHAIN --reeval`,
or the adaptive worker's auto-repeat) draws fresh eval samples (its `draw`, 1, 2, ...; the
chain's own eval is draw 0). Counted as separate runs they would pass one training's noise off
as several; kept apart from the first they would be wasted. So the evals of one training
(`RunRecord.train_id`) are pooled per problem: counts summed, samples per problem summed, the
score avg@(k1 + k2 + ...) over them. Only the eval-sampling part of the noise shrinks (V_r is
computed from the pooled counts), the training part stays one draw, which is what the forecast's
per-run noise train_var + V_r says.

Evaluations of the same draw are the same samples again (an eval re-run after a failure, or a
store from before draws existed): only the latest counts. Pooling needs per-problem counts over
the same problems; without them the latest draw stands alone, with a note.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from opsdctl.stats import inference


def merge(runs: Sequence) -> tuple[list, list[str]]:
    """(records, notes): compare's full RunRecords with one record per training, in the order of each training's
    first eval (see the module docstring). Callers pass full runs only: a partial eval is a
    screening look, never pooled with a full one."""
    groups: dict[int, dict] = {}
    for r in runs:
        draws = groups.setdefault(r.train_id if r.train_id is not None else -r.chain_id, {})
        kept = draws.get(r.draw)
        if kept is None or r.chain_id > kept.chain_id:
            draws[r.draw] = r
    out, notes = [], []
    for draws in groups.values():
        evals = [draws[d] for d in sorted(draws)]
        if len(evals) == 1:
            out.append(evals[0])
            continue
        pooled = pool(evals)
        if pooled is None:
            latest = max(evals, key=lambda r: r.chain_id)
            notes.append(f"{latest.key}: the checkpoint of chain {latest.train_id} has {len(evals)} evaluations "
                         f"(chains {', '.join(str(r.chain_id) for r in evals)}) without per-problem counts over the "
                         f"same problems: only the latest (chain {latest.chain_id}) counts")
            out.append(latest)
        else:
            out.append(pooled)
    return out, notes


def pool(evals: Sequence):
    """The evaluations of one checkpoint (fresh draws) as one run: per-problem counts and samples
    summed; None when a draw lacks counts or the problems differ."""
    first = evals[0]
    if any(r.counts is None or r.n_problems != first.n_problems or r.problem_ids != first.problem_ids
           for r in evals):
        return None
    counts = tuple(sum(c) for c in zip(*(r.counts for r in evals)))
    k = sum(r.k for r in evals)
    return replace(first, score=inference.run_score(counts, k), k=k, counts=counts, draw=0,
                   evals=tuple(r.chain_id for r in evals))
