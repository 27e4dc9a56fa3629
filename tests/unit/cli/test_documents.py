"""The documents status and compare build (opsdctl.cli.documents) read each thing once: the time
left, the baseline's latest version and the stage-duration history come from one ReadContext
(opsdctl.plan.read_context), whatever asks for them below."""

from __future__ import annotations

from collections import Counter

import pytest
from store_fill import filled  # noqa: F401  (a fixture)

from opsdctl.plan.budget import CLOCK_KEY
from opsdctl.store import queries


def counting(reader) -> Counter:
    """Count what `reader` is asked: the duration history, the budget clock, a name's versions."""
    seen: Counter = Counter()
    tuples, get_meta, named = reader.tuples, reader.get_meta, reader.variants_named

    def count_tuples(sql, **kw):
        if sql == queries.DURATION_HISTORY:
            seen["history"] += 1
        return tuples(sql, **kw)

    def count_meta(key):
        seen[key] += 1
        return get_meta(key)

    def count_named(name):
        seen["variants_named"] += 1
        return named(name)

    reader.tuples, reader.get_meta, reader.variants_named = count_tuples, count_meta, count_named
    return seen


@pytest.fixture
def reader(filled):  # noqa: F811
    from opsdctl.store.open_read import open_reader

    cfg, _ = filled
    return cfg, open_reader(cfg.db)


def test_compare_reads_the_history_the_clock_and_the_baseline_once(reader):
    from opsdctl.cli.documents.compare import compare_report

    cfg, r = reader
    seen = counting(r)
    report = compare_report(cfg, r)
    assert report.advice and report.budget.chain_minutes is not None
    assert (seen["history"], seen[CLOCK_KEY], seen["variants_named"]) == (1, 1, 1)


def test_status_reads_the_history_the_clock_and_the_baseline_once(reader):
    from opsdctl.cli.documents.status import gather_status

    cfg, r = reader
    seen = counting(r)
    doc = gather_status(cfg, r, None)
    assert doc["planner"]["timeline"]  # the worker's own order, planned from the same history
    assert (seen["history"], seen[CLOCK_KEY], seen["variants_named"]) == (1, 1, 1)


def test_the_context_is_what_the_parts_read(reader):
    from opsdctl.plan.read_context import read_context

    cfg, r = reader
    ctx = read_context(cfg, r, now=ctx_now(r))
    assert ctx.baseline == "baseline" and ctx.baseline_hparams is not None
    assert ctx.estimator is ctx.estimator and ctx.samples is ctx.samples  # built once, on first use
    train, evaluate = ctx.estimator.chain(cfg.profile, ctx.baseline_hparams,
                                          gpus=(ctx.layout.gpus_of("train"), ctx.layout.gpus_of("eval")))
    assert ctx.chain_minutes() == pytest.approx((train.high_s + evaluate.high_s) / 60.0, rel=1e-12)
    assert ctx.minutes_left == pytest.approx(max(0.0, ctx.budget.usable_seconds / 60.0), rel=1e-12)


def ctx_now(r) -> float:
    """Two hours after the store's budget clock started."""
    return float(r.get_meta(CLOCK_KEY)) + 2 * 3600.0


def test_compare_document_adds_submit_and_run_next_to_the_reports_keys(reader):
    from opsdctl.cli.documents.compare import compare_document
    from opsdctl.plan.store_report import store_leader, store_report

    cfg, r = reader
    doc = compare_document(cfg, r)
    got = doc.to_json()
    report_keys = list(doc.report.to_json())
    assert list(got) == report_keys + ["submit", "run_next"]  # the report's keys, in order, then the two
    assert got["run_next"] == got["advice"][0]
    lead = store_leader(r, store_report(cfg, r))  # what `export-recipe --leader` writes
    assert got["submit"] == {"leader": lead.name, "variant": lead.variant, "verdict": lead.verdict,
                             "forecast": lead.forecast.to_json(), "rule": lead.rule}
    # whatever is shown, the pick is over every candidate against the configured baseline
    some = compare_document(cfg, r, ["cosine@v1"], family="cosine@v1,token-clip").to_json()
    assert some["submit"] == got["submit"] and [v["name"] for v in some["variants"]] != [
        v["name"] for v in got["variants"]]
