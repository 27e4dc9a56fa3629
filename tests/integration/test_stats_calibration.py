"""The statistics' calibration against direct simulations of their models: the forecast's 80%
intervals, P(best) and P(above the reference) over sessions drawn from its model, its intervals with
sigma estimated on few dof, and the sequential boundary's crossing probability against a simulated
walk. Pure and in process, but seconds of CPU each: here, not in the unit loop (the family's
effects are drawn by the helper of tests/unit/stats/test_forecast.py)."""

import math

import numpy as np
import pytest

from opsdctl.stats import forecast as fc
from opsdctl.stats import sequential as seq
from tests.unit.stats.test_forecast import FIXED, REF, _draw_effects, arm


def _simulate(rng, sessions, fam, n_b, n_c, use_ref=True):
    """Draw sessions from the generative model and return (forecasts, true 5-run official means,
    the published means)."""
    out_f, out_y, refs = [], [], []
    for _ in range(sessions):
        b_true = 54.0
        d = REF.offset_sd * rng.standard_normal()
        theta = np.concatenate([[0.0], _draw_effects(rng, fam, len(n_c))])
        ref = fc.PublishedRef(b_true + rng.normal(0, REF.sd / math.sqrt(REF.n)), REF.sd, REF.n, REF.offset_sd)
        noise = fc.NoiseParts(REF.sd**2 - 1.0, 1.0)  # run sd = the published 1.48
        sd_run = math.sqrt(noise.run_var)
        arms = [fc.ArmRuns(f"a{i}", tuple(b_true + d + theta[i] + sd_run * rng.standard_normal(n)))
                for i, n in enumerate([n_b, *n_c])]
        post = fc.posterior(arms[0], arms[1:], noise, ref if use_ref else None, fam)
        out_f.append(post.forecasts(draws=4000))
        out_y.append(b_true + theta + rng.standard_normal(len(theta)) * math.sqrt(noise.run_var / 5))
        refs.append(ref.mean)
    return out_f, np.array(out_y), np.array(refs)


def _walk_crossing(c, reps=200_000, horizon=400, seed=0):
    """P(S_j >= c shape(j) sqrt(j) for some j <= horizon), S_j a sum of j standard normals."""
    rng = np.random.default_rng(seed)
    js = np.arange(1, horizon + 1)
    bound = c * np.array([seq._shape(j) for j in js]) * np.sqrt(js)
    hit = np.zeros(reps, bool)
    s = np.zeros(reps, np.float32)
    for j in range(horizon):
        s += rng.standard_normal(reps, dtype=np.float32)
        hit |= s >= bound[j]
    return hit.mean()


def test_coverage_and_calibration_against_a_simulation_of_the_model():
    rng = np.random.default_rng(2025)
    fs, ys, refs = _simulate(rng, 250, fc.FamilyPrior(), n_b=2, n_c=[1, 2, 3])
    low = np.array([[f.low80 for f in row] for row in fs])
    high = np.array([[f.high80 for f in row] for row in fs])
    cover = ((low <= ys) & (ys <= high)).mean()
    assert 0.75 <= cover <= 0.85, cover
    # p_best: the arm with the highest official mean, calibration of the mean probability
    pb = np.array([[f.p_best for f in row] for row in fs])
    won = (ys == ys.max(axis=1, keepdims=True))
    assert abs(pb.mean(axis=0) - won.mean(axis=0)).max() < 0.07
    # p_above_reference in fifths (the candidates: the baseline's is ~0.5 by construction)
    probs = np.array([[f.p_above_reference for f in row[1:]] for row in fs]).ravel()
    hits = (ys[:, 1:] > refs[:, None]).ravel()
    for lo in np.arange(0.0, 1.0, 0.2):
        sel = (probs >= lo) & (probs < lo + 0.2)
        if sel.sum() > 60:
            assert abs(probs[sel].mean() - hits[sel].mean()) < 0.08, (lo, probs[sel].mean(), hits[sel].mean())


def test_intervals_cover_80_percent_when_sigma_is_estimated_on_few_dof():
    # sigma drawn as a 3-dof estimate: a normal with s^2 plugged in covers ~72%, the t 80%
    rng = np.random.default_rng(5)
    sigma, nu, hits = 1.5, 3, []
    for _ in range(2000):
        s2 = sigma**2 * rng.chisquare(nu) / nu
        b_true = 54.0
        r = b_true + rng.normal(0, sigma / math.sqrt(5))
        post = fc.posterior(arm("b", list(b_true + 1.0 + sigma * rng.standard_normal(2))), [],
                            fc.NoiseParts(s2, 0.0, dof=nu), fc.PublishedRef(r, math.sqrt(s2), 5), FIXED)
        f = post.forecasts()[0]
        hits.append(f.low80 <= b_true + rng.normal(0, sigma / math.sqrt(5)) <= f.high80)
    assert 0.77 <= np.mean(hits) <= 0.83, np.mean(hits)


@pytest.mark.parametrize("c", [2.152, 2.6])
def test_crossing_probability_matches_a_simulated_walk(c):
    got = seq.crossing_probability(c)
    emp = _walk_crossing(c)
    assert got == pytest.approx(emp, abs=4 * math.sqrt(emp * (1 - emp) / 200_000) + 2e-4)
