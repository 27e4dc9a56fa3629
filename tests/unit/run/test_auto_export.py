"""`[export]`'s pure parts: the leader rule on a compare report, when a write is due, and the evidence
the header gives."""

from __future__ import annotations

from opsdctl.plan.budget import BudgetView
from opsdctl.run.auto_export import Leader, _evidence, due, pick_leader


def _entry(name, verdict, p_beat, mean=50.0, n=2, partial=False):
    return {"name": name, "variants": [name.split(" @")[0]], "verdict": verdict, "p_beat": p_beat, "mean": mean,
            "n": n, "partial": partial}


def _report(*entries):
    return {"baseline": {"name": "baseline", "mean": 50.0, "n": 3, "source": "runs"}, "variants": list(entries)}


def test_leader_rule():
    # the highest P(beat) among `better`, whatever the undecided ones say
    r = _report(_entry("a", "better", 0.97), _entry("b @3f2a1c", "better", 0.995), _entry("c", "undecided", 0.999))
    lead = pick_leader(r)
    assert (lead.name, lead.variant, lead.verdict) == ("b @3f2a1c", "b", "better")
    # no `better`: the undecided one with the highest P(beat), if ahead of the baseline
    r = _report(_entry("a", "undecided", 0.7), _entry("b", "undecided", 0.9), _entry("w", "worse", 0.0),
                _entry("p", "undecided", 0.99, partial=True))
    assert pick_leader(r).name == "b" and pick_leader(r).verdict == "undecided"
    # an undecided candidate behind the baseline is a worse bet than the baseline itself
    base = pick_leader(_report(_entry("a", "undecided", 0.3), _entry("w", "worse", 0.01)))
    assert base.variant is None and base.name == "baseline" and "empty recipe" in base.rule
    # what has no recipe (the base model, an outside checkpoint) never leads
    r = _report(_entry("base", "better", 0.99), _entry("a", "undecided", 0.8))
    assert pick_leader(r, lambda label: label != "base").name == "a"
    assert pick_leader(_report()).variant is None  # nothing scored yet


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
    line = _evidence(report, leader)[0]
    assert "7 runs in the store, combined with the published mean 54.22" in line
    assert "the published reference, n = 7" not in line
    report["baseline"].update(source="reference", n=5, n_local=0)
    assert "the published reference, n = 5" in _evidence(report, leader)[0]
