"""The compare report as the user sees it: the configured baseline, the family, and the time the
budget has left.

The statistics themselves (opsdctl.stats) know nothing of budgets or of the store; this puts the
pieces together for `opsdctl compare` and the demo: every scored run of the store (the noise
pools them all, whatever is shown), the family the verdicts correct for, and the time left. The
store is read through a light reader (opsdctl.store.reader; `open_reader(store)` for a Store).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Optional, Sequence, Union

from opsdctl.errors import UserError
from opsdctl.plan.read_context import ReadContext, read_context
from opsdctl.plan.store_facts import latest_version
from opsdctl.stats.compare import build_report
from opsdctl.stats.report import Report
from opsdctl.stats.scores import candidate_runs
from opsdctl.stats.training import training_rows
from opsdctl.store import queries
from opsdctl.store.values import variant_label

FAMILY_HELP = '"all", "since:2025-06-01T00:00" or a comma list of variant names'


def parse_family(text: Union[str, Sequence[str], None], where: str = "--family") -> Union[str, list[str]]:
    """"all" | "since:ISO" | [names]: the family spec of `--family` or `[compare] family`."""
    if text is None:
        return "all"
    if not isinstance(text, str):
        return [str(x) for x in text]
    t = text.strip()
    if t == "all":
        return t
    if t.startswith("since:"):
        _since(t, where)
        return t
    names = [x.strip() for x in t.split(",") if x.strip()]
    if not names:
        raise UserError(f"{where} {text!r}: give {FAMILY_HELP}")
    return names


def _since(spec: str, where: str) -> dt.datetime:
    raw = spec[len("since:"):].strip()
    try:
        when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{where} {spec!r}: {raw!r} is not an ISO time such as 2025-06-01T09:00") from None
    return when if when.tzinfo is not None else when.astimezone()


def family_labels(reader, spec: Union[str, list[str]], where: str = "--family") -> Optional[list[str]]:
    """The variant labels of a family spec; None for "all" (every candidate with a run)."""
    if spec == "all":
        return None
    if isinstance(spec, str):  # since:
        when = _since(spec, where).astimezone(dt.timezone.utc)
        return [variant_label(n, v) for n, v in reader.tuples(queries.VARIANTS_FIRST_QUEUED_SINCE, since=when)]
    out = []
    for ref in spec:
        try:
            out.append(reader.find_variant(ref).label)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
    return out


def compare_doc(ctx: ReadContext, variant_refs: Optional[Sequence[str]] = None, baseline: Optional[str] = None,
                pool_code: bool = False, family: Optional[str] = None, training: bool = True) -> Report:
    """The `opsdctl compare` report for the configured baseline, family and the time left, with
    what compare prints besides (its notes, training columns and the ranked next actions).
    Candidates are (variant, code tree) unless `pool_code` (opsdctl.stats.candidates). `ctx`: the
    command's read context (opsdctl.plan.read_context): the time left, the layout, the baseline
    and the learned durations, each read once for the report and its advice alike. `training`:
    False leaves out the training columns (what `advise` and compare's first screen do not show;
    at 10,000 chains they are a fifth of the time).

    Every scored run of the store goes in (the noise pools them all, whatever is shown; the family
    counts every candidate tried). An explicit `baseline` (`--baseline NAME`) must name a variant
    in the store: a typo would otherwise silently compare against the published reference."""
    reader = ctx.reader
    inputs = _inputs(ctx, baseline, pool_code, family, list(variant_refs or []))
    chain_minutes = ctx.chain_minutes()  # a baseline chain on the worker's layout
    everything = inputs.report(None, chain_minutes)
    shown = None
    if inputs.shown_labels:
        shown = [inputs.base] + [k for k in dict.fromkeys(r.key for r in inputs.runs if r.variant in inputs.shown_labels)
                                 if k != inputs.base]
    report = everything if shown is None else inputs.report(shown, chain_minutes)
    report = replace(report, notes=(*inputs.notes, *report.notes), pool_code=pool_code,
                     training=tuple(training_rows(reader, report)) if training else None)
    # the ranking weighs every candidate, whichever are shown: the same as `opsdctl advise`
    return replace(report, advice=tuple(_advice_for(ctx, everything, inputs.runs)))


def store_report(cfg, reader) -> Report:
    """compare's report over every candidate for the configured baseline and family, without the
    extras compare prints: what the submission rule, the export header and the verdict watcher
    read (the worker's threads build it every few seconds, so it skips the training columns and
    the ranking)."""
    return submission_report(read_context(cfg, reader))


def submission_report(ctx: ReadContext) -> Report:
    """store_report of a command's read context."""
    return _inputs(ctx, None, False, None).report(None, None)


def store_leader(reader, report: Report):
    """What to submit now (opsdctl.plan.submission.pick_leader) on a report of the store: only a
    variant with a recipe may lead (not the base model, not a checkpoint trained outside)."""
    from opsdctl.plan.submission import pick_leader

    kinds = {v.label: v.kind for v in reader.all_variants()}
    return pick_leader(report, lambda label: kinds.get(label) == "recipe")


@dataclass(frozen=True)
class _Inputs:
    """What a compare report is built from: the baseline's label, the family, the scored runs
    (and the labels of the variants asked to be shown)."""

    cfg: object
    base: Optional[str]
    shown_labels: list
    family: Sequence[str]
    runs: list
    notes: list
    minutes_left: Optional[float]

    def report(self, variants: Optional[Sequence[str]], chain_minutes: Optional[float]) -> Report:
        return build_report(self.runs, baseline=self.base, reference=self.cfg.reference, variants=variants,
                            family=self.family, chain_minutes=chain_minutes, minutes_left=self.minutes_left)


def _inputs(ctx: ReadContext, baseline: Optional[str], pool_code: bool, family: Optional[str],
            refs: Sequence[str] = ()) -> _Inputs:
    cfg, reader = ctx.cfg, ctx.reader
    base = ctx.baseline
    if baseline is not None:
        try:
            reader.find_variant(baseline)
        except UserError as exc:
            raise UserError(f"--baseline {baseline}: {exc}; leave it out to use [baseline] variant "
                            f"({cfg.baseline_variant or 'unset'})") from None
        base = latest_version(reader, baseline)[0]
    shown_labels = [reader.find_variant(r).label for r in refs]
    spec = parse_family(family, "--family") if family is not None else parse_family(
        cfg.section("compare").get("family", "all"), f"{cfg.where}: [compare] family")
    fam = family_labels(reader, spec, "--family" if family is not None else f"{cfg.where}: [compare] family")
    runs, notes = candidate_runs(reader, None, pool_code=pool_code, baseline=base)
    return _Inputs(cfg, base, shown_labels, fam, runs, notes, ctx.minutes_left)


def _advice_for(ctx: ReadContext, report: Report, runs: list) -> list:
    """The ranked next actions (opsdctl.plan.advise) for a compare report over every candidate:
    the baseline recipe's learned durations, the usable time left, the queued ideas not yet run
    (queue order) and the checkpoints that may be re-evaluated (opsdctl.plan.reeval)."""
    from opsdctl.plan import advise, reeval

    cfg, reader, lay = ctx.cfg, ctx.reader, ctx.layout
    costs = advise.costs_of(ctx.estimator, cfg.profile, ctx.baseline_hparams,
                            (lay.gpus_of("train"), lay.gpus_of("eval")), lay.max_chains)
    tried = {e.name for e in report.entries if e.n} | {report.baseline.name}
    labels = {v.id: v.label for v in reader.all_variants()}
    ideas = [labels[c.variant_id] for c in reader.queued_chains() if labels.get(c.variant_id) not in tried]
    return advise.from_report(report, costs, ctx.budget.usable_seconds, list(dict.fromkeys(ideas)),
                              reeval.targets(reader, cfg, runs))
