"""`opsdctl demo`'s choice of what to export: the candidate most likely to beat the baseline."""

from __future__ import annotations


def test_demo_picks_the_candidate_most_likely_to_beat_the_baseline():
    from opsdctl.cli.demo import best_variant

    report = {"baseline": {"name": "baseline"}, "variants": [
        {"name": "a", "n": 2, "p_beat": 0.7, "delta": 1.0},
        {"name": "b", "n": 2, "p_beat": 0.9, "delta": 2.0},
        {"name": "c", "n": 1, "p_beat": 0.99, "delta": 5.0, "partial": True}]}
    assert best_variant(report) == "b"
    report["variants"] = [{"name": "a", "n": 2, "p_beat": 0.2, "delta": -1.0}]
    assert best_variant(report) == "baseline"  # nothing beats it: keep the released recipe
