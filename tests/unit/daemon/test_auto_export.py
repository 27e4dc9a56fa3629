"""`[export]`'s pure parts: the leader rule on a compare report, when a write is due, and the evidence
the header gives."""

from __future__ import annotations

from opsdctl.plan.budget import BudgetView
from opsdctl.daemon.auto_export import _evidence, due
from opsdctl.plan.submission import Leader, pick_leader
from tests.support.report_doc import report as typed


def _entry(name, verdict, p_beat, mean=50.0, n=2, partial=False, fc=None, p_best=0.2):
    return {"name": name, "variants": [name.split(" @")[0]], "verdict": verdict, "p_beat": p_beat, "mean": mean,
            "n": n, "partial": partial, "forecast": {"mean": fc, "low80": None if fc is None else fc - 2,
                                                     "high80": None if fc is None else fc + 2,
                                                     "p_above_reference": 0.5, "p_best": p_best}}


def _report(*entries, base_fc=50.0, s=1.48, runs=(50.0, 50.5, 49.5)):
    return typed({"baseline": {"name": "baseline", "mean": 50.0, "n": len(runs), "runs": list(runs), "source": "runs",
                               "reference": {"mean": 50.0, "sd": 1.48, "n": 5, "prior": True, "offset_sd": 1.0},
                               "offset_sd": 1.0,
                               "forecast": {"mean": base_fc, "low80": 48.0, "high80": 52.0, "p_above_reference": 0.5,
                                            "p_best": 0.3}},
                  "noise": {"s": s, "nu": 6.0}, "variants": list(entries)})


def test_leader_rule_submits_a_clear_winner_whatever_the_verdicts_say():
    r = _report(_entry("a", "better", 0.999, mean=51.0), _entry("b @3f2a1c", "undecided", 0.9, mean=55.5, fc=53.0),
                _entry("c", "undecided", 0.97, mean=51.9))
    lead = pick_leader(r)
    assert (lead.name, lead.variant, lead.verdict) == ("b @3f2a1c", "b", "undecided")
    assert lead.forecast.mean == 53.0 and "P >=" in lead.rule  # the header states the leader's compare forecast
    # partial evaluations never lead, even far ahead
    r = _report(_entry("a", "undecided", 0.7, mean=55.0), _entry("p", "undecided", 0.99, partial=True, mean=60.0))
    assert pick_leader(r).name == "a"
    # a hair ahead on one run: not enough to submit over the baseline
    base = pick_leader(_report(_entry("a", "undecided", 0.6, mean=50.4, n=1), _entry("w", "worse", 0.01, mean=45.0)))
    assert base.variant is None and base.name == "baseline" and "empty recipe" in base.rule
    assert base.forecast.mean == 50.0
    # what has no recipe (the base model, an outside checkpoint) never leads
    r = _report(_entry("base", "better", 0.99, mean=58.0), _entry("a", "undecided", 0.8, mean=55.0))
    assert pick_leader(r, lambda label: label != "base").name == "a"
    assert pick_leader(_report()).variant is None  # nothing scored yet
    # no noise estimate at all: nothing can be bet on, the baseline
    assert pick_leader(_report(_entry("a", "undecided", None, mean=58.0), s=None)).variant is None


def test_a_session_of_harmful_ideas_keeps_the_baseline():
    # five ideas well below the baseline and one a point and a half above it on one run: the family
    # says that one is most likely lucky
    ideas = [_entry(f"h{i}", "undecided", 0.1, mean=m, n=1) for i, m in enumerate((47.0, 47.5, 48.0, 47.2, 46.5))]
    r = _report(*ideas, _entry("lucky", "undecided", 0.7, mean=51.5, n=1))
    assert pick_leader(r).variant is None
    # the same run among quiet ideas is worth more, and clearer evidence carries it
    quiet = [_entry(f"q{i}", "undecided", 0.5, mean=m, n=1) for i, m in enumerate((50.2, 49.8, 50.4, 49.6, 50.1))]
    assert pick_leader(_report(*quiet, _entry("clear", "undecided", 0.95, mean=54.0, n=2))).variant == "clear"


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
