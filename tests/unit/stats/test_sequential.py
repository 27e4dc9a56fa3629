"""opsdctl.stats.sequential: the table against the recursion, and the nominal levels the verdicts use
(the boundary against a direct simulation of the walk: tests/integration/test_stats_calibration.py)."""

import math

import numpy as np
import pytest
from scipy import stats as ss

from opsdctl.stats import sequential as seq


def test_crossing_probability_with_one_look_is_the_normal_tail(monkeypatch):
    # a single look at j = J_MIN: P(S_j / sqrt(j) >= c) = 1 - Phi(c), exactly
    monkeypatch.setattr(seq, "_shape", lambda j: 1.0 if j == seq.J_MIN else math.inf)
    for c in (1.5, 2.3):
        got = seq.crossing_probability(c, horizon=seq.J_MIN + 2)
        later = np.arange(seq.J_MIN + 3, 100_000)  # every later look at once (a loop of scipy calls took 10 s)
        tail = ss.norm.sf(c * (later / seq.J_FLAT) ** seq.GROWTH).sum()
        assert got - tail == pytest.approx(ss.norm.sf(c), rel=1e-4)


@pytest.mark.parametrize("m", [1, 3, 17])
def test_table_is_the_recursion(m):
    assert seq.TABLE[m - 1] == pytest.approx(seq._solve(0.05 / m), abs=2e-6)
    assert seq.crossing_probability(seq.TABLE[m - 1]) == pytest.approx(0.05 / m, rel=1e-4)


def test_nominal_levels():
    c = seq.boundary_constant(0.05)
    assert [seq.nominal_level(j, 0.05) for j in range(1, seq.J_MIN)] == [0.0] * (seq.J_MIN - 1)
    for j in range(seq.J_MIN, seq.J_FLAT + 1):
        assert seq.nominal_level(j, 0.05) == pytest.approx(ss.norm.sf(c), rel=1e-12)
    for j in (9, 16, 64):
        assert seq.nominal_level(j, 0.05) == pytest.approx(ss.norm.sf(c * (j / 8) ** 0.25), rel=1e-12)
    levels = [seq.nominal_level(j, 0.05) for j in range(seq.J_MIN, 200)]
    assert levels == sorted(levels, reverse=True)  # never easier with more looks behind
    # every look's level is far above a Bonferroni split over 12 looks, below the one-look alpha
    assert 0.05 / 12 < seq.nominal_level(6, 0.05) < 0.05
    # a level not in the table is computed (and cached)
    assert seq.boundary_constant(0.05 / 40) > seq.TABLE[-1]
    with pytest.raises(ValueError):
        seq.boundary_constant(0.0)
