"""The compare document: the report against the baseline with the time left, what to submit now
and what to run next; `opsdctl compare` and `opsdctl advise` render it, the dashboard's compare
page too."""

from __future__ import annotations

from typing import Optional, Sequence


def compare_report(cfg, reader, variants: Optional[Sequence[str]] = None, baseline: Optional[str] = None,
                   family: Optional[str] = None, pool_code: bool = False):
    """`opsdctl compare --json`, and the dashboard's compare page: the report with the minutes a
    baseline chain takes (the planner's estimate), so "do the runs needed fit" is answered, and the
    ranked next actions; the time left, the layout, the baseline and the durations read once
    (opsdctl.plan.read_context), in one snapshot of the store."""
    from opsdctl.plan.read_context import read_context
    from opsdctl.plan.store_report import compare_doc

    with reader.snapshot() as r:
        return compare_doc(read_context(cfg, r), variants, baseline, pool_code=pool_code, family=family)
