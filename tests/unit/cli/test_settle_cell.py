"""compare's "to settle" words, short (the table, the dashboard) and long (compare --explain), from
one rule: the same entry gives the same branch in both."""

from __future__ import annotations

import pytest

from opsdctl.cli.cells import settle_cell


@pytest.mark.parametrize("entry, short, long", [
    ({"runs_needed": 1}, "+1 run", "+1 run"),
    ({"runs_needed": 3, "runs_needed_worse": 1}, "+3 runs", "+3 runs"),
    ({"runs_needed_worse": 2}, "+2 (worse)", "+2 runs (worse)"),
    ({"needs_baseline_runs": True, "runs_needed_both_arms": 47}, "+47 each", "baseline too: +47 each"),
    ({"needs_baseline_runs": True}, "out of reach", "baseline too: out of reach"),
    ({"verdict": "better"}, "settled", "settled"),
    ({"verdict": "undecided"}, "-", "-"),
])
def test_short_and_long_words_of_each_case(entry, short, long):
    assert settle_cell(entry) == short
    assert settle_cell(entry, long=True) == long
