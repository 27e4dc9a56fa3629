"""The compare document: the report against the baseline with the time left, what to submit now
and what to run next; `opsdctl compare` and `opsdctl advise` render it, the dashboard's compare
page too."""

from __future__ import annotations

from typing import Optional, Sequence


def compare_report(cfg, reader, variants: Optional[Sequence[str]] = None, baseline: Optional[str] = None,
                   family: Optional[str] = None, pool_code: bool = False):
    """`opsdctl compare --json`, and the dashboard's compare page: the report with the minutes a
    baseline chain takes (the planner's estimate), so "do the runs needed fit" is answered."""
    from opsdctl.plan.durations import chain_minutes
    from opsdctl.plan.store_facts import known_layout
    from opsdctl.plan.store_report import compare_doc

    minutes = chain_minutes(cfg, reader, known_layout(cfg, reader))  # on the worker's GPU layout
    return compare_doc(cfg, reader, variants, baseline, chain_minutes=minutes, pool_code=pool_code, family=family)
