"""`opsdctl demo` exports what the submission rule picks."""

from __future__ import annotations


def test_demo_picks_what_the_submission_rule_picks():
    from opsdctl.cli.commands.demo import best_variant
    from tests.support.report_doc import report as typed

    def fc(mean):
        return {"mean": mean, "low80": mean - 2, "high80": mean + 2, "p_above_reference": 0.5, "p_best": 0.3}

    report = {"baseline": {"name": "baseline", "forecast": fc(50.0), "runs": [50.0, 50.4], "n": 2},
              "noise": {"s": 1.0, "nu": 6.0}, "variants": [
        {"name": "a", "variants": ["a"], "n": 2, "mean": 51.0, "p_beat": 0.95, "forecast": fc(51.0)},
        {"name": "b", "variants": ["b"], "n": 2, "mean": 54.0, "p_beat": 0.9, "forecast": fc(52.0)},  # clearly ahead
        {"name": "c", "variants": ["c"], "n": 1, "mean": 60.0, "p_beat": 0.99, "partial": True, "forecast": fc(60.0)}]}
    assert best_variant(typed(report)) == "b"
    report["variants"] = [{"name": "a", "variants": ["a"], "n": 2, "mean": 49.0, "p_beat": 0.6, "forecast": fc(49.0)}]
    assert best_variant(typed(report)) == "baseline"  # nothing above it: keep the released recipe
