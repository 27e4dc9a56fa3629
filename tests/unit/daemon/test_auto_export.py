"""`[export]`'s pure parts: the leader rule on a compare report, when a write is due, and the evidence
the header gives."""

from __future__ import annotations

from opsdctl.plan.budget import BudgetView
from opsdctl.daemon.auto_export import _evidence, due
from opsdctl.plan.submission import Leader, leading, pick_leader
from tests.support.report_doc import report as typed


def _entry(name, verdict, p_beat, mean=50.0, n=2, partial=False, fc=None, p_best=0.2, p_gain=0.9):
    return {"name": name, "variants": [name.split(" @")[0]], "verdict": verdict, "p_beat": p_beat, "mean": mean,
            "n": n, "partial": partial, "forecast": {"mean": fc, "low80": None if fc is None else fc - 2,
                                                     "high80": None if fc is None else fc + 2,
                                                     "p_above_reference": 0.5, "p_best": p_best,
                                                     "p_above_baseline": None if fc is None else p_gain}}


def _report(*entries, base_fc=50.0):
    return typed({"baseline": {"name": "baseline", "mean": 50.0, "n": 3, "source": "runs",
                         "forecast": {"mean": base_fc, "low80": 48.0, "high80": 52.0, "p_above_reference": 0.5,
                                      "p_best": 0.3}},
            "variants": list(entries)})


def test_leader_rule_is_the_highest_forecast():
    # the bet: the highest forecast official mean, whatever the verdicts and P(beat) say
    r = _report(_entry("a", "better", 0.999, fc=51.0), _entry("b @3f2a1c", "undecided", 0.9, fc=52.5),
                _entry("c", "undecided", 0.97, fc=51.9))
    lead = pick_leader(r)
    assert (lead.name, lead.variant, lead.verdict) == ("b @3f2a1c", "b", "undecided")
    assert lead.forecast.mean == 52.5 and "highest forecast" in lead.rule
    # partial evaluations never lead, even with the highest forecast
    r = _report(_entry("a", "undecided", 0.7, fc=51.0), _entry("p", "undecided", 0.99, partial=True, fc=60.0))
    assert pick_leader(r).name == "a"
    # ahead on the forecast but P(above the baseline) short of the threshold: the baseline
    assert pick_leader(_report(_entry("a", "undecided", 0.6, fc=51.0, p_gain=0.5))).variant is None
    # none forecast above the baseline: the baseline's empty recipe, with the baseline's forecast
    base = pick_leader(_report(_entry("a", "undecided", 0.6, fc=49.9), _entry("w", "worse", 0.01, fc=45.0)))
    assert base.variant is None and base.name == "baseline" and "empty recipe" in base.rule
    assert base.forecast.mean == 50.0
    # what has no recipe (the base model, an outside checkpoint) never leads
    r = _report(_entry("base", "better", 0.99, fc=58.0), _entry("a", "undecided", 0.8, fc=51.0))
    assert pick_leader(r, lambda label: label != "base").name == "a"
    assert pick_leader(_report()).variant is None  # nothing scored yet
    # no forecast (no noise estimate): nothing can be bet on, the baseline
    assert pick_leader(_report(_entry("a", "undecided", None, fc=None))).variant is None


def test_the_rule_alone_on_bare_forecasts():
    # what pick_leader and the decision benchmark's rebuilt forecasts both apply
    from types import SimpleNamespace as F

    fc = {"a": F(mean=52.0, p_best=0.30, p_above_baseline=0.9), "b": F(mean=52.0, p_best=0.31, p_above_baseline=0.9),
          "c": F(mean=51.0, p_best=0.5, p_above_baseline=0.95)}
    assert leading(list(fc), fc.__getitem__, 50.0) == "b"  # a tie on the mean goes to the higher p_best
    assert leading(list(fc), fc.__getitem__, 52.0) is None  # equal to the baseline's is not above it
    assert leading(list(fc), fc.__getitem__, None) == "b"  # nothing to beat
    assert leading([], fc.__getitem__, 40.0) is None
    assert leading(["a"], lambda n: F(mean=53.0, p_best=None, p_above_baseline=0.9), 50.0) == "a"  # no p_best: 0
    # ahead on the mean but not sure enough to beat the baseline: the next one that is, else the baseline
    fc["b"] = F(mean=52.0, p_best=0.31, p_above_baseline=0.6)
    assert leading(list(fc), fc.__getitem__, 50.0) == "a"
    unsure = {"a": F(mean=55.0, p_best=0.9, p_above_baseline=0.79)}
    assert leading(list(unsure), unsure.__getitem__, 50.0) is None


def test_when_it_is_due():
    view = lambda left: BudgetView("remaining_file", left, 300.0, None)  # noqa: E731
    assert due(view(601.0), 10) == (False, "starts 10 min before the deadline (in 1s)")
    assert due(view(599.0), 10)[0] and due(view(599.0), 10)[1] == "9m59s before the deadline"
    assert due(view(-5.0), 10)[0]  # past the deadline: still write
    assert due(BudgetView("none", None, 0.0, None), 10) == (True, "no deadline known")


def test_auto_export_header_names_local_runs_combined_with_the_published_mean():
    report = {"baseline": {"name": "baseline", "mean": 54.9, "n": 7, "n_local": 7, "source": "runs+reference",
                           "reference": {"mean": 54.22, "offset_sd": 1.0}},
              "variants": []}
    leader = Leader("baseline", None, None, None, "rule")
    # the forecast line comes first; the evidence line names the baseline's runs
    line = next(x for x in _evidence(typed(report), leader) if x.startswith("evidence:"))
    assert "7 runs in the store, combined with the published mean 54.22" in line
    assert "the published reference, n = 7" not in line
    report["baseline"].update(source="reference", n=5, n_local=0)
    assert any("the published reference, n = 5" in x for x in _evidence(typed(report), leader))
