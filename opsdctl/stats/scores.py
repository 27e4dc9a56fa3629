"""From the store to the statistics: scored runs as plain records, and one variant's runs.

compare (issue 3) and the planner read runs through here, so both see the same records.
"""

from __future__ import annotations

from typing import Optional, Sequence

from opsdctl.recipes import partial
from opsdctl.stats.compare import RunRecord
from opsdctl.store.engine import Store, find_variant, scored_runs
from opsdctl.store.models import variant_label


def run_records(store: Store, variant_refs: Optional[Sequence[str]] = None) -> list[RunRecord]:
    """Every succeeded, scored chain (of the named variants, when given) as a RunRecord."""
    with store.read() as s:
        ids = None
        if variant_refs:
            ids = [find_variant(s, ref).id for ref in variant_refs]
        rows = scored_runs(s, ids)
        return [_record(chain, variant, score) for chain, variant, score in rows]


def _record(chain, variant, score) -> RunRecord:
    problems = score.problems or None
    counts = tuple(int(p["correct"]) for p in problems) if problems else None
    ids = tuple(str(p.get("id", i)) for i, p in enumerate(problems)) if problems else None
    return RunRecord(
        variant=variant_label(variant.name, variant.version),
        chain_id=chain.id,
        score=float(score.avg_at_k),
        k=int(score.k),
        n_problems=int(score.n_problems),
        counts=counts,
        problem_ids=ids,
        partial=partial.run_is_partial(chain, score),  # queued --partial, or the evaluator said so
    )


def show_doc(store: Store, ref: str) -> dict:
    """One variant: its recipe and every chain with score, per-problem counts and train stats."""
    from opsdctl.store.engine import chains_of_variant, score_of, stages_of, train_stats_of

    with store.read() as s:
        v = find_variant(s, ref)
        runs = []
        for chain in chains_of_variant(s, v.id):
            score = score_of(s, chain.id)
            ts = train_stats_of(s, chain.id)
            runs.append({
                "chain_id": chain.id, "seed": chain.seed, "repeat": chain.repeat, "state": chain.state,
                "reason": chain.reason,
                "score": None if score is None else round(score.avg_at_k, 4),
                "k": score.k if score else None,
                "n_problems": score.n_problems if score else None,
                "partial": partial.run_is_partial(chain, score),
                "eval": partial.of_chain(chain).to_json(),  # {"num_problems", "k"} asked for; None = full
                "eval_only": bool(chain.eval_only),
                "checkpoint": chain.checkpoint,
                "trained_by": chain.trained_by,
                "problems": score.problems if score else None,
                # NVML, sampled by the worker: {"train": {peak_mib, util_pct, attribution, ...}, "eval": ...}
                "gpu": {st.name: {**(st.gpu or {}), "peak_mib": st.gpu_peak_mib, "util_pct": st.gpu_util_pct}
                        for st in stages_of(s, chain.id) if st.gpu_peak_mib is not None},
                "train": None if ts is None else {
                    "final_loss": ts.final_loss, "mean_kl": ts.mean_kl, "frac_clipped": ts.frac_clipped,
                    "step_seconds": ts.step_seconds, "rollout_seconds": ts.rollout_seconds,
                    "peak_mem_mib": ts.peak_mem_mib, "steps": ts.steps,
                    "metrics": ts.metrics or {},  # [stages.train.metrics]: name -> {mean, last, steps}
                    "curve": ts.curve or [],  # per logged step: loss, kl, frac_clipped, learning_rate, ...
                },
            })
        return {"variant": v.label, "name": v.name, "version": v.version, "hash": v.hash, "kind": v.kind,
                "description": v.description, "hparams": v.hparams, "method": v.method, "runs": runs}
