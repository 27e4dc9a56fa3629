"""From the store to the statistics: scored runs as plain records, and one variant's runs.

compare (issue 3) and the planner read runs through here, so both see the same records.
"""

from __future__ import annotations

from typing import Optional, Sequence

from opsdctl.compare import RunRecord
from opsdctl.models import variant_label
from opsdctl.store import Store, find_variant, scored_runs


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
        partial=bool(score.partial),
    )


def compare_doc(cfg, store: Store, variant_refs: Optional[Sequence[str]], baseline: Optional[str],
                chain_minutes: Optional[float] = None) -> dict:
    """The `opsdctl compare` report for the configured baseline and the time left."""
    from opsdctl.budget import budget_now
    from opsdctl.compare import build_report
    from opsdctl.status import clock_start
    from opsdctl.store import variants_named

    base = baseline or cfg.baseline_variant
    if base and "@" not in base:  # a bare name means its latest version, as everywhere else
        with store.read() as s:
            versions = variants_named(s, base)
            base = versions[-1].label if versions else base
    refs = list(variant_refs or [])
    runs = run_records(store, [*refs, base] if refs and base and base not in refs else refs or None)
    shown = None
    if refs:
        shown = [base] + [r.variant for r in runs if r.variant in refs or r.variant.split("@")[0] in refs]
    budget = budget_now(cfg.budget, clock_start(store) if cfg.budget.kind == "hours" else None)
    usable = budget.usable_seconds
    return build_report(
        runs,
        baseline=base,
        reference=cfg.reference,
        variants=shown,
        chain_minutes=chain_minutes,
        minutes_left=None if usable is None else max(0.0, usable / 60.0),
    )


def show_doc(store: Store, ref: str) -> dict:
    """One variant: its recipe and every chain with score, per-problem counts and train stats."""
    from opsdctl.store import chains_of_variant, score_of, train_stats_of

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
                "partial": score.partial if score else None,
                "problems": score.problems if score else None,
                "train": None if ts is None else {
                    "final_loss": ts.final_loss, "mean_kl": ts.mean_kl, "frac_clipped": ts.frac_clipped,
                    "step_seconds": ts.step_seconds, "rollout_seconds": ts.rollout_seconds,
                    "peak_mem_mib": ts.peak_mem_mib, "steps": ts.steps,
                },
            })
        return {"variant": v.label, "name": v.name, "version": v.version, "hash": v.hash,
                "description": v.description, "hparams": v.hparams, "method": v.method, "runs": runs}
