"""The knowledge gradient's exact form against a direct simulation and against known cases."""

import math

import numpy as np
import pytest

from opsdctl.stats.knowledge_gradient import expected_max, knowledge_gradient, update_direction


@pytest.mark.parametrize("seed", range(8))
def test_expected_max_matches_monte_carlo(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 7))
    a = rng.normal(0, 2, k)
    b = rng.normal(0, 1, k)
    if seed % 3 == 0 and k > 1:  # ties in slope and in intercept
        b[1] = b[0]
        a[-1] = a[0]
    z = rng.standard_normal(400_000)
    mc = np.max(a[:, None] + b[:, None] * z[None, :], axis=0)
    se = mc.std() / math.sqrt(z.size)
    assert abs(expected_max(a, b) - mc.mean()) < 4 * se + 1e-12


def test_two_arms_closed_form():
    # E[max(0, d + sZ)] = d Phi(d/s) + s phi(d/s)
    d, s = -0.7, 1.3
    want = d * 0.5 * math.erfc(-d / s / math.sqrt(2)) + s * math.exp(-0.5 * (d / s) ** 2) / math.sqrt(2 * math.pi)
    assert expected_max([0.0, d], [0.0, s]) == pytest.approx(want, abs=1e-12)
    assert knowledge_gradient([0.0, d], [0.0, s]) == pytest.approx(want, abs=1e-12)


def test_no_movement_is_worth_nothing():
    assert knowledge_gradient([1.0, 3.0, 2.0], [0.5, 0.5, 0.5]) == pytest.approx(0.0, abs=1e-15)
    assert knowledge_gradient([1.0, 3.0], [0.0, 0.0]) == 0.0


def test_untried_arm_counts_only_after_it_is_observed():
    # a new idea whose prior mean is above today's best is not today's choice
    g = knowledge_gradient([0.0, 0.5], [0.0, 1.0], now=[True, False])
    assert g == pytest.approx(expected_max([0.0, 0.5], [0.0, 1.0]) - 0.0)
    assert g > 0.5


def test_update_direction_is_the_posterior_mean_move():
    rng = np.random.default_rng(3)
    m = rng.normal(size=(3, 3))
    cov = m @ m.T + np.eye(3)
    h, n = np.array([0.0, 1.0, 0.0]), 0.8
    b = update_direction(cov, h, n)
    # the posterior covariance shrinks by b b'
    post = cov - np.outer(cov @ h, cov @ h) / (h @ cov @ h + n)
    assert np.allclose(cov - post, np.outer(b, b))
