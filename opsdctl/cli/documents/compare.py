"""The compare document: the report against the baseline with the time left, what to submit now
and what to run next; `opsdctl compare` and `opsdctl advise` render it, the dashboard's compare
page too.

Its JSON is the report's (`compare --json`, keys stable) plus two keys that lead with the answer:
"submit" (the submission rule's pick, opsdctl.plan.submission.pick_leader, exactly what
`export-recipe --leader` writes: {"leader", "variant", "verdict", "forecast", "rule"}) and
"run_next" (the top of the ranked "advice", as `opsdctl advise` lists it first; None without a
noise estimate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class CompareDocument:
    report: object  # opsdctl.stats.report.Report, with its training columns and advice
    submit: object  # opsdctl.plan.submission.Leader

    def to_json(self) -> dict:
        lead = self.submit
        doc = self.report.to_json()
        doc["submit"] = {"leader": lead.name, "variant": lead.variant, "verdict": lead.verdict,
                         "forecast": lead.forecast.to_json(), "rule": lead.rule}
        doc["run_next"] = doc["advice"][0] if doc.get("advice") else None
        return doc


def compare_report(cfg, reader, variants: Optional[Sequence[str]] = None, baseline: Optional[str] = None,
                   family: Optional[str] = None, pool_code: bool = False):
    """The report `opsdctl advise` ranks from: compare's (without its training columns), with the
    minutes a baseline chain takes (the planner's estimate), so "do the runs needed fit" is
    answered, and the ranked next actions; the time left, the layout, the baseline and the
    durations read once (opsdctl.plan.read_context), in one snapshot of the store."""
    from opsdctl.plan.read_context import read_context
    from opsdctl.plan.store_report import compare_doc

    with reader.snapshot() as r:
        return compare_doc(read_context(cfg, r), variants, baseline, pool_code=pool_code, family=family,
                           training=False)


def compare_document(cfg, reader, variants: Optional[Sequence[str]] = None, baseline: Optional[str] = None,
                     family: Optional[str] = None, pool_code: bool = False, training: bool = True) -> CompareDocument:
    """`opsdctl compare` and the dashboard's compare page: the report (with its training columns
    unless `training` is False: compare's first screen does not show them) and what to submit now.
    The pick is `export-recipe --leader`'s: over every candidate, against the configured baseline
    and family; so when the options shown differ, its report is built apart."""
    from opsdctl.plan.read_context import read_context
    from opsdctl.plan.store_report import compare_doc, store_leader, submission_report

    with reader.snapshot() as r:
        ctx = read_context(cfg, r)
        report = compare_doc(ctx, variants, baseline, pool_code=pool_code, family=family, training=training)
        default = not variants and baseline is None and family is None and not pool_code
        leader = store_leader(r, report if default else submission_report(ctx))
    return CompareDocument(report, leader)
