"""benchmarks/decision.py's own maths: the exact posterior it scores the forecast's calibration
against, and the sampling floor of the calibration measure, both against direct simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from support.bench_import import bench_module


@pytest.fixture(scope="module")
def decision():
    return bench_module("decision")


def test_the_exact_posterior_is_calibrated_on_the_world_it_knows(decision):
    # ideas from the benchmark's mix, one or two runs each around a known level: the posterior's
    # P(official mean above the published one) matches how often that happened, bin by bin, and
    # its mean effect matches the drawn effects
    rng = np.random.default_rng(7)
    sigma, level = 1.48, 55.0
    effects = np.array(decision.draw_effects(rng, 6000))
    runs = rng.integers(1, 3, effects.size)
    ps, ms, above = [], [], []
    for eff, n in zip(effects, runs):
        ys = level + eff + rng.normal(0.0, sigma, n)
        m, p = decision._bayes(ys, level, sigma)
        ms.append(m)
        ps.append(p)
        above.append(eff + rng.normal(0.0, sigma * math.sqrt(2 / 5)) > 0.0)
    ps, ms, above = np.array(ps), np.array(ms), np.array(above)
    for lo in np.arange(0.0, 1.0, 0.2):
        sel = (ps >= lo) & (ps < lo + 0.2)
        assert sel.sum() > 200
        se = math.sqrt(0.25 / sel.sum())
        assert abs(ps[sel].mean() - above[sel].mean()) < 4 * se
    for lo, hi in ((-6, -2), (-2, -0.5), (-0.5, 0.5), (0.5, 5)):
        sel = (ms >= lo) & (ms < hi)
        assert sel.sum() > 200
        assert abs(ms[sel].mean() - effects[sel].mean()) < 4 * effects[sel].std() / math.sqrt(sel.sum())


def test_the_exact_posterior_knows_the_baseline_level_and_the_sd(decision):
    assert decision._bayes([60.0], 55.0, 1.48)[1] > 0.9  # a run 5 points up: a helpful idea, surely
    assert decision._bayes([50.0], 55.0, 1.48)[1] < 0.1
    m, p = decision._bayes([55.0, 55.0], 55.0, 1.48)
    assert abs(m) < 0.6 and 0.3 < p < 0.6  # right on the level: most likely null


def test_the_sampling_floor_of_one_decile_is_the_binomial_spread(decision):
    # 400 arms at p = 0.5: the worst gap is |Bin(400, 0.5) / 400 - 0.5|, whose median is exact
    floor = decision.calibration_floor([0.5] * 400, redraws=4000, seed=3)
    j = next(j for j in range(200) if stats.binom.cdf(200 + j, 400, 0.5) - stats.binom.cdf(199 - j, 400, 0.5) >= 0.5)
    assert abs(floor["median"] - j / 400) <= 1 / 400
    # P(gap > 0.05) = P(|k - 200| > 20)
    want = 1.0 - (stats.binom.cdf(220, 400, 0.5) - stats.binom.cdf(179, 400, 0.5))
    assert abs(floor["p_over_goal"] - want) < 4 * math.sqrt(want * (1 - want) / 4000)


def test_the_sampling_floor_judges_only_deciles_the_benchmark_judges(decision):
    # 19 arms in a decile are shown, not judged (MIN_DECILE_ARMS): the 0.05 decile adds nothing
    few = [0.05] * (decision.MIN_DECILE_ARMS - 1)
    a = decision.calibration_floor([0.5] * 400 + few, redraws=4000, seed=1)
    b = decision.calibration_floor([0.5] * 400, redraws=4000, seed=2)
    assert a["redraws"] == 4000 and abs(a["median"] - b["median"]) <= 2 / 400
    assert decision.calibration_floor([], seed=1)["median"] is None
    assert decision.calibration_floor(few, seed=1)["median"] is None


@pytest.fixture(scope="module")
def shapes(decision):
    return bench_module("calibration_shapes")


def test_the_sd_integrated_posterior_is_the_integral_by_hand(decision, shapes):
    # one session, two ideas: P(above) integrates sigma under the published sd's scaled inverse
    # chi^2 on 4 dof times the within-arm scatter and both arms' marginals, against scipy's quad
    from scipy import integrate

    level = 55.0
    row = {"sigma": 2.5, "level": level, "arms": [
        {"name": "baseline", "runs": [], "above": True},
        {"name": "a", "runs": [58.0, 56.5], "above": True},
        {"name": "b", "runs": [51.0], "above": False}]}
    got = {x["p_above"] for x in shapes.sigma_integrated(row)}
    grid, mass = decision.MIX_SLAB

    def marginal(ys, s):
        se = s / math.sqrt(len(ys))
        x = np.mean(ys) - level
        k0 = decision.NULL * stats.norm.pdf(x, 0.0, se)
        ks = mass * stats.norm.pdf(x, grid, se)
        scatter = s ** -(len(ys) - 1) * math.exp(-((np.asarray(ys) - np.mean(ys)) ** 2).sum() / (2 * s * s))
        return (k0 + ks.sum()) * scatter, decision._bayes(ys, level, s)[1]

    def weight(s):  # the scaled inverse chi^2 on 4 dof at 1.48, as a density of s
        return s ** -5 * math.exp(-4 * 1.48**2 / (2 * s * s))

    def joint(s):
        return weight(s) * marginal([58.0, 56.5], s)[0] * marginal([51.0], s)[0]

    z = integrate.quad(joint, 0.3, 12.0, limit=200)[0]
    for ys in ([58.0, 56.5], [51.0]):
        want = integrate.quad(lambda s: joint(s) * marginal(ys, s)[1], 0.3, 12.0, limit=200)[0] / z
        assert min(abs(g - want) for g in got) < 2e-3
    assert 0.5 in got  # the baseline: its official mean against the published one is a coin flip
