"""The compare report as the user sees it: the configured baseline, and the time the budget has left.

The statistics themselves (opsdctl.stats) know nothing of budgets; this puts the two together for
`opsdctl compare` and the demo.
"""

from __future__ import annotations

from typing import Optional, Sequence

from opsdctl.plan.budget import budget_now, clock_start
from opsdctl.stats.compare import build_report
from opsdctl.stats.scores import candidate_runs
from opsdctl.stats.training import training_rows
from opsdctl.store.engine import Store, variants_named


def compare_doc(cfg, store: Store, variant_refs: Optional[Sequence[str]], baseline: Optional[str],
                chain_minutes: Optional[float] = None, pool_code: bool = False) -> dict:
    """The `opsdctl compare` report for the configured baseline and the time left. Candidates are
    (variant, code tree) unless `pool_code` (opsdctl.stats.candidates)."""
    base = baseline or cfg.baseline_variant
    if base and "@" not in base:  # a bare name means its latest version, as everywhere else
        with store.read() as s:
            versions = variants_named(s, base)
            base = versions[-1].label if versions else base
    refs = list(variant_refs or [])
    runs, notes = candidate_runs(store, [*refs, base] if refs and base and base not in refs else refs or None,
                                 pool_code=pool_code, baseline=base)
    shown = None
    if refs:
        shown = [base] + [r.key for r in runs if r.variant in refs or r.variant.split("@")[0] in refs]
    budget = budget_now(cfg.budget, clock_start(store) if cfg.budget.kind == "hours" else None)
    usable = budget.usable_seconds
    report = build_report(
        runs,
        baseline=base,
        reference=cfg.reference,
        variants=shown,
        chain_minutes=chain_minutes,
        minutes_left=None if usable is None else max(0.0, usable / 60.0),
    )
    report["notes"] = [*notes, *report.get("notes", [])]
    report["pool_code"] = pool_code
    report["training"] = training_rows(store, report)  # compare's training columns
    return report
