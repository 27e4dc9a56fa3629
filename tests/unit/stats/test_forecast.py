"""The forecast of the official score (opsdctl.stats.forecast): closed forms in float64, and a
direct simulation of the generative model for coverage and calibration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from opsdctl.stats import forecast as fc

NOISE = fc.NoiseParts(train_var=1.2, eval_var=1.0)
REF = fc.PublishedRef(54.22, 1.48, 5, offset_sd=1.0)
FIXED = fc.FamilyPrior(spread=2.0, spread_log_sd=0.0, mean=0.0, mean_sd=0.0)


def arm(name, ys, v=None):
    return fc.ArmRuns(name, tuple(ys), tuple([v] * len(ys)) if v is not None else ())


def test_baseline_local_runs_only_closed_form():
    ys = [53.0, 55.5, 54.1]
    post = fc.posterior(arm("b", ys), [], NOISE, None, FIXED)
    # B = (B + d) - d: the local mean, plus the offset's variance
    assert post.mean[0] == pytest.approx(np.mean(ys), abs=1e-9)
    assert post.cov[0, 0] == pytest.approx(NOISE.run_var / 3 + 1.0, rel=1e-9)
    pred = post.predictive_cov()[0, 0]
    assert pred == pytest.approx(NOISE.run_var / 3 + 1.0 + NOISE.run_var / 5, rel=1e-9)


def test_reference_only_and_combined_closed_form():
    post = fc.posterior(arm("b", []), [], NOISE, REF, FIXED)
    assert post.mean[0] == pytest.approx(54.22)
    assert post.cov[0, 0] == pytest.approx(1.48**2 / 5)
    # with local baseline runs the setup offset d is flat: they measure d, and B is the published mean's
    # alone (a prior on d would lend B part of any offset: every arm's forecast shifted with it)
    ys = [56.0, 57.0]
    post = fc.posterior(arm("b", ys, 0.9), [], NOISE, REF, FIXED)
    assert post.mean[0] == pytest.approx(54.22, abs=1e-9)
    assert post.cov[0, 0] == pytest.approx(1.48**2 / 5, rel=1e-9)
    d_var = (NOISE.train_var + 0.9) / 2 + 1.48**2 / 5
    assert post.state_mean[1] == pytest.approx(56.5 - 54.22, abs=1e-9)
    assert post.state_cov[1, 1] == pytest.approx(d_var, rel=1e-9)


def test_a_setup_offset_does_not_move_the_forecast():
    # the same local runs 2 points higher (a setup offset) leave every arm's forecast where it was
    base, cands = [53.0, 55.0], [[56.0, 57.0], [52.0]]
    post = fc.posterior(arm("b", base), [arm(f"c{i}", c) for i, c in enumerate(cands)], NOISE, REF)
    up = fc.posterior(arm("b", [y + 2 for y in base]), [arm(f"c{i}", [y + 2 for y in c]) for i, c in enumerate(cands)],
                      NOISE, REF)
    assert np.allclose(post.mean, up.mean, atol=1e-9)
    assert np.allclose(post.cov, up.cov, atol=1e-9)


def test_candidate_shrinkage_closed_form():
    # a precise local baseline; tau fixed, family mean 0: theta | ybar_c ~ shrunk by tau^2 / (tau^2 + v)
    base = arm("b", [54.0] * 40)
    post = fc.posterior(base, [arm("c", [58.0, 57.0])], NOISE, None, FIXED)
    v_c = NOISE.run_var / 2
    v_b = NOISE.run_var / 40
    # exact: theta's obs is ybar_c - ybar_b with var v_c + v_b (B + d integrated, flat)
    k = 4.0 / (4.0 + v_c + v_b)
    assert post.mean[1] - post.mean[0] == pytest.approx(k * 3.5, abs=1e-9)
    assert post.cov[1, 1] + post.cov[0, 0] - 2 * post.cov[0, 1] == pytest.approx(k * (v_c + v_b), rel=1e-9)


def test_runs_with_counts_are_weighted_by_their_own_eval_variance():
    ys = (50.0, 60.0)
    a = fc.ArmRuns("b", ys, (0.2, 5.0))
    post = fc.posterior(a, [], NOISE, None, FIXED)
    w = np.array([1 / (1.2 + 0.2), 1 / (1.2 + 5.0)])
    assert post.mean[0] == pytest.approx(float(w @ ys / w.sum()))


def test_after_runs_equals_the_posterior_with_those_runs():
    base, c = arm("b", [54.0, 55.0]), arm("c", [56.0])
    post = fc.posterior(base, [c], NOISE, REF, FIXED)
    more = fc.posterior(base, [arm("c", [56.0, 50.0, 61.0])], NOISE, REF, FIXED)
    assert np.allclose(post.after_runs(1, 2), more.cov, atol=1e-10)
    more_b = fc.posterior(arm("b", [54.0, 55.0, 1.0]), [c], NOISE, REF, FIXED)
    assert np.allclose(post.after_runs(0, 1), more_b.cov, atol=1e-10)


def test_p_best_exact_for_two_arms_and_monte_carlo_matches_simulation():
    mu = np.array([1.0, 1.5])
    cov = np.array([[1.0, 0.3], [0.3, 2.0]])
    p = fc.p_best(mu, cov)
    assert p[1] == pytest.approx(stats.norm.cdf(0.5 / math.sqrt(1.0 + 2.0 - 0.6)), abs=1e-12)
    mu3 = np.array([0.0, 0.4, -0.2])
    cov3 = np.array([[1.0, 0.5, 0.5], [0.5, 1.5, 0.5], [0.5, 0.5, 0.8]])
    p3 = fc.p_best(mu3, cov3)
    assert p3.sum() == pytest.approx(1.0)
    x = np.random.default_rng(7).multivariate_normal(mu3, cov3, 400_000)
    direct = np.bincount(np.argmax(x, axis=1), minlength=3) / x.shape[0]
    assert np.max(np.abs(p3 - direct)) < 0.005
    assert np.max(np.abs(p3 - fc.p_best(mu3, cov3, seed=99))) < 0.005  # stable to 0.005 across seeds
    assert np.array_equal(p3, fc.p_best(mu3, cov3))  # fixed seed: reproducible


def _simulate(rng, sessions, prior_draw_tau, fam, n_b, n_c, use_ref=True):
    """Draw sessions from the generative model and return (forecasts, true 5-run official means)."""
    out_f, out_y = [], []
    for _ in range(sessions):
        tau = math.exp(math.log(fam.spread) + fam.spread_log_sd * rng.standard_normal()) if prior_draw_tau else fam.spread
        m = fam.mean + fam.mean_sd * rng.standard_normal()
        b_true = 54.0
        d = REF.offset_sd * rng.standard_normal()
        theta = np.concatenate([[0.0], m + tau * rng.standard_normal(len(n_c))])
        ref = fc.PublishedRef(b_true + rng.normal(0, REF.sd / math.sqrt(REF.n)), REF.sd, REF.n, REF.offset_sd)
        noise = fc.NoiseParts(REF.sd**2 - 1.0, 1.0)  # run sd = the published 1.48
        sd_run = math.sqrt(noise.run_var)
        arms = [fc.ArmRuns(f"a{i}", tuple(b_true + d + theta[i] + sd_run * rng.standard_normal(n)))
                for i, n in enumerate([n_b, *n_c])]
        post = fc.posterior(arms[0], arms[1:], noise, ref if use_ref else None, fam)
        out_f.append(post.forecasts(draws=20_000))
        out_y.append(b_true + theta + rng.standard_normal(len(theta)) * math.sqrt(noise.run_var / 5))
    return out_f, np.array(out_y)


@pytest.mark.parametrize("prior_draw_tau", [False, True])
def test_coverage_and_calibration_against_a_simulation_of_the_model(prior_draw_tau):
    rng = np.random.default_rng(2025)
    fam = fc.FamilyPrior(spread=2.0, spread_log_sd=0.0 if not prior_draw_tau else fc.SPREAD_PRIOR_LOG_SD)
    fs, ys = _simulate(rng, 300 if prior_draw_tau else 500, prior_draw_tau, fam, n_b=2, n_c=[1, 2, 3])
    low = np.array([[f.low80 for f in row] for row in fs])
    high = np.array([[f.high80 for f in row] for row in fs])
    cover = ((low <= ys) & (ys <= high)).mean()
    assert 0.76 <= cover <= 0.84, cover
    # p_best: the arm with the highest official mean, calibration of the mean probability
    pb = np.array([[f.p_best for f in row] for row in fs])
    won = (ys == ys.max(axis=1, keepdims=True))
    assert abs(pb.mean(axis=0) - won.mean(axis=0)).max() < 0.06


def test_p_above_reference_is_calibrated_in_a_simulation():
    rng = np.random.default_rng(11)
    hits, probs = [], []
    fam = fc.FamilyPrior(spread=2.0, spread_log_sd=0.0)
    for _ in range(3000):  # bins of ~500: the mean of a bin is good to ~0.02
        d = rng.standard_normal()
        theta = fam.mean + math.hypot(2.0, fam.mean_sd) * rng.standard_normal()  # m + tau z
        b_true = 54.0
        r_mean = b_true + rng.normal(0, 1.48 / math.sqrt(5))
        ref = fc.PublishedRef(r_mean, 1.48, 5, 1.0)
        noise = fc.NoiseParts(1.48**2 - 1.0, 1.0)
        sd = 1.48
        base = fc.ArmRuns("b", tuple(b_true + d + sd * rng.standard_normal(2)))
        cand = fc.ArmRuns("c", tuple(b_true + d + theta + sd * rng.standard_normal(2)))
        f = fc.posterior(base, [cand], noise, ref, fam).forecasts()[1]
        official = b_true + theta + rng.normal(0, sd / math.sqrt(5))
        probs.append(f.p_above_reference)
        hits.append(official > r_mean)
    probs, hits = np.array(probs), np.array(hits)
    for lo in np.arange(0.0, 1.0, 0.2):
        sel = (probs >= lo) & (probs < lo + 0.2)
        if sel.sum() > 200:
            assert abs(probs[sel].mean() - hits[sel].mean()) < 0.06, (lo, probs[sel].mean(), hits[sel].mean())


def test_spread_is_learned_from_a_large_family():
    rng = np.random.default_rng(3)
    base = fc.ArmRuns("b", tuple(54 + 1.48 * rng.standard_normal(4)))
    wide = [fc.ArmRuns(f"c{i}", tuple(54 + 6 * rng.standard_normal() + 1.48 * rng.standard_normal(2)))
            for i in range(20)]
    narrow = [fc.ArmRuns(f"c{i}", tuple(54 + 1.48 * rng.standard_normal(2))) for i in range(20)]
    noise = fc.NoiseParts(1.48**2 - 1.0, 1.0)
    assert fc.posterior(base, wide, noise, REF).spread > 3.5
    assert fc.posterior(base, narrow, noise, REF).spread < 1.5
    # one candidate: the prior's centre (the small-family default)
    one = fc.posterior(base, narrow[:1], noise, REF)
    assert 1.5 < one.spread < 3.0


def test_nothing_to_forecast_from():
    assert fc.posterior(fc.ArmRuns("b"), [fc.ArmRuns("c")], NOISE, None) is None


def test_compare_gives_every_entry_exactly_the_forecast_keys():
    from opsdctl.config import Reference
    from opsdctl.stats.compare import RunRecord, build_report

    runs = [RunRecord("baseline", i, y, 12, 30, None, None, False) for i, y in enumerate((54.0, 55.5, 53.5))]
    runs += [RunRecord("a", 10 + i, y, 12, 30, None, None, False) for i, y in enumerate((57.0, 58.5))]
    runs += [RunRecord("b", 20, 52.0, 12, 30, None, None, False), RunRecord("a", 30, 60.0, 4, 15, None, None, True)]
    rep = build_report(runs, baseline="baseline", reference=Reference(54.22, 1.48, 5),
                       variants=["baseline", "a", "b", "ghost"]).to_json()
    keys = {"mean", "low80", "high80", "p_above_reference", "p_best"}
    entries = [rep["baseline"], *rep["variants"]]
    assert {e["name"] for e in rep["variants"]} == {"a", "b", "ghost"} and any(e.get("partial") for e in entries)
    assert all(set(e["forecast"]) == keys for e in entries)
    full = [e for e in entries if e.get("n") and not e.get("partial")]
    assert all(e["forecast"]["mean"] is not None for e in full)
    assert sum(e["forecast"]["p_best"] for e in full) == pytest.approx(1.0, abs=1e-9)  # a, b, baseline: all arms
    a = next(e for e in full if e["name"] == "a")
    assert a["forecast"]["low80"] < a["forecast"]["mean"] < a["forecast"]["high80"]
    assert a["forecast"]["mean"] < a["mean"]  # shrunk toward the family: the winner's curse


def test_forecast_noise_carries_s_squared_and_its_dof():
    from opsdctl.stats.compare import forecast_noise

    n = forecast_noise(2.0, 0.5, nu=10)
    assert n.run_var == pytest.approx(2.0) and n.eval_var == 0.5 and n.dof == 10
    assert forecast_noise(2.0, 0.5, nu=0).dof is None  # no dof: taken as known
    assert forecast_noise(2.0, None, nu=30).eval_var == 0.0 and forecast_noise(None, 0.5) is None


def test_an_estimated_sigma_gives_a_student_t_forecast():
    noise = fc.NoiseParts(1.2, 1.0, dof=3.0)
    f = fc.posterior(arm("b", [55.0, 56.0]), [], noise, REF, FIXED).forecasts()[0]
    sd = math.sqrt(noise.run_var / 5 + 1.48**2 / 5)  # B from the reference alone, plus the official runs
    assert f.high80 - f.mean == pytest.approx(stats.t.ppf(0.9, 3.0) * sd, rel=1e-9)
    assert f.p_above_reference == pytest.approx(0.5)


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


def test_an_untried_idea_is_forecast_at_the_family_mean():
    fam = fc.FamilyPrior(spread=2.0, spread_log_sd=0.0, mean=-0.5, mean_sd=1.0)
    post = fc.posterior(arm("b", [54.0, 55.0]), [fc.ArmRuns("new")], NOISE, REF, fam)
    assert post.mean[1] - post.mean[0] == pytest.approx(-0.5, abs=1e-9)
    var_effect = post.cov[1, 1] + post.cov[0, 0] - 2 * post.cov[0, 1]
    assert var_effect == pytest.approx(2.0**2 + 1.0**2, rel=1e-9)  # tau^2 + mean_sd^2
