"""The forecast of the official score (opsdctl.stats.forecast): closed forms in float64 (coverage
and calibration against a direct simulation of the generative model, seconds of CPU:
tests/integration/test_stats_calibration.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from opsdctl.stats import forecast as fc

NOISE = fc.NoiseParts(train_var=1.2, eval_var=1.0)
REF = fc.PublishedRef(54.22, 1.48, 5, offset_sd=1.0)
# the plain normal family, fixed: every closed form of a linear-Gaussian model holds (to the level
# grid's quadrature error)
FIXED = fc.FamilyPrior(null_share=0.0, null_strength=0.0, sides=(fc.Side(1.0, 0.0, 2.0),), side_strength=0.0,
                       scale_log_sd=0.0)


def arm(name, ys, v=None):
    return fc.ArmRuns(name, tuple(ys), tuple([v] * len(ys)) if v is not None else ())


def test_baseline_local_runs_only_closed_form():
    ys = [53.0, 55.5, 54.1]
    post = fc.posterior(arm("b", ys), [], NOISE, None, FIXED)
    # B = (B + d) - d: the local mean, plus the offset's variance
    assert post.mean[0] == pytest.approx(np.mean(ys), abs=1e-6)
    assert post.cov[0, 0] == pytest.approx(NOISE.run_var / 3 + 1.0, rel=1e-5)
    pred = post.predictive_cov()[0, 0]
    assert pred == pytest.approx(NOISE.run_var / 3 + 1.0 + NOISE.run_var / 5, rel=1e-5)


def test_reference_only_and_combined_closed_form():
    post = fc.posterior(arm("b", []), [], NOISE, REF, FIXED)
    assert post.mean[0] == pytest.approx(54.22)
    assert post.cov[0, 0] == pytest.approx(1.48**2 / 5)
    # with local baseline runs the setup offset d is flat: they measure d, and B is the published mean's
    # alone (a prior on d would lend B part of any offset: every arm's forecast shifted with it)
    ys = [56.0, 57.0]
    post = fc.posterior(arm("b", ys, 0.9), [], NOISE, REF, FIXED)
    assert post.mean[0] == pytest.approx(54.22, abs=1e-6)
    assert post.cov[0, 0] == pytest.approx(1.48**2 / 5, rel=1e-5)
    d_var = (NOISE.train_var + 0.9) / 2 + 1.48**2 / 5
    assert post.state_mean[1] == pytest.approx(56.5 - 54.22, abs=1e-6)
    assert post.state_cov[1, 1] == pytest.approx(d_var, rel=1e-5)


def test_a_setup_offset_does_not_move_the_forecast():
    # the same local runs 2 points higher (a setup offset) leave every arm's forecast where it was
    base, cands = [53.0, 55.0], [[56.0, 57.0], [52.0]]
    post = fc.posterior(arm("b", base), [arm(f"c{i}", c) for i, c in enumerate(cands)], NOISE, REF)
    up = fc.posterior(arm("b", [y + 2 for y in base]), [arm(f"c{i}", [y + 2 for y in c]) for i, c in enumerate(cands)],
                      NOISE, REF)
    assert np.allclose(post.mean, up.mean, atol=1e-6)
    assert np.allclose(post.cov, up.cov, atol=1e-6)


def test_candidate_shrinkage_closed_form():
    # a precise local baseline; tau fixed, family mean 0: theta | ybar_c ~ shrunk by tau^2 / (tau^2 + v)
    base = arm("b", [54.0] * 40)
    post = fc.posterior(base, [arm("c", [58.0, 57.0])], NOISE, None, FIXED)
    v_c = NOISE.run_var / 2
    v_b = NOISE.run_var / 40
    # exact: theta's obs is ybar_c - ybar_b with var v_c + v_b (B + d integrated, flat)
    k = 4.0 / (4.0 + v_c + v_b)
    assert post.mean[1] - post.mean[0] == pytest.approx(k * 3.5, abs=1e-6)
    assert post.cov[1, 1] + post.cov[0, 0] - 2 * post.cov[0, 1] == pytest.approx(k * (v_c + v_b), rel=1e-5)


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
    assert np.allclose(post.after_runs(1, 2), more.cov, atol=1e-6)
    more_b = fc.posterior(arm("b", [54.0, 55.0, 1.0]), [c], NOISE, REF, FIXED)
    assert np.allclose(post.after_runs(0, 1), more_b.cov, atol=1e-6)


def test_p_best_matches_the_exact_two_arm_probability_and_is_reproducible():
    post = fc.posterior(arm("b", [54.0, 55.0]), [arm("c", [56.0])], NOISE, REF, FIXED)
    cov = post.predictive_cov()
    v = cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]
    exact = stats.norm.cdf((post.mean[1] - post.mean[0]) / math.sqrt(v))
    f = post.forecasts()
    assert f[1].p_best == pytest.approx(exact, abs=0.006)  # 60k draws: SE 0.002
    assert f[0].p_best + f[1].p_best == pytest.approx(1.0)
    assert f[1].p_best == post.forecasts()[1].p_best  # fixed seed


def _draw_hyper(rng, fam, n):
    """n draws of (null share, first side's share, scale) from the family's priors."""
    pi = rng.beta(fam.null_share * fam.null_strength, (1 - fam.null_share) * fam.null_strength, n) \
        if fam.null_strength > 0 else np.full(n, fam.null_share)
    two = len(fam.sides) == 2
    rho = rng.beta(fam.sides[0].share * fam.side_strength, (1 - fam.sides[0].share) * fam.side_strength, n) \
        if two and fam.side_strength > 0 else np.full(n, fam.sides[0].share if two else 1.0)
    k = np.exp(fam.scale_log_sd * rng.standard_normal(n))
    return pi, rho, k


def _effects(rng, fam, pi, rho, k, shape):
    """Effects under the hyperparameters (broadcast over `shape`): null, else the first side with
    probability rho, else the second."""
    a, b = fam.sides[0], fam.sides[-1]
    first = rng.random(shape) < rho
    m = np.where(first, a.mean, b.mean) * k
    sd = np.where(first, a.sd, b.sd) * k
    return np.where(rng.random(shape) < pi, 0.0, m + sd * rng.standard_normal(shape))


def _draw_effects(rng, fam, n):
    """Effects from the family prior: hyperparameters drawn from their priors, then each idea."""
    pi, rho, k = _draw_hyper(rng, fam, 1)
    return _effects(rng, fam, pi[0], rho[0], k[0], n)


def test_the_quadrature_matches_importance_sampling_of_the_model():
    # reference, no local baseline run (L has a proper prior): the posterior by weighting 400k
    # prior draws with the likelihood, against the node mixture's. The official baseline B is the
    # reference's alone (the cut: candidates place L = B + d, not B), so an arm's official mean is an
    # independent B around the reference plus its effect
    fam = fc.FamilyPrior()
    noise = fc.NoiseParts(1.2, 1.0)
    cands = [arm("c0", [57.5, 56.0]), arm("c1", [53.0])]
    post = fc.posterior(fc.ArmRuns("b"), cands, noise, REF, fam)
    rng = np.random.default_rng(17)
    n = 400_000
    pi, rho, k = _draw_hyper(rng, fam, n)
    b = REF.mean + REF.sd / math.sqrt(REF.n) * rng.standard_normal(n)  # flat B seen through the reference
    d = REF.offset_sd * rng.standard_normal(n)
    theta = _effects(rng, fam, pi, rho, k, (2, n))
    logw = np.zeros(n)
    for c, ys in enumerate(([57.5, 56.0], [53.0])):
        for y in ys:
            logw += -0.5 * (y - b - d - theta[c]) ** 2 / noise.run_var
    w = np.exp(logw - logw.max())
    w /= w.sum()
    assert abs(post.mean[1] - (REF.mean + w @ theta[0])) < 0.03
    assert abs(post.mean[2] - (REF.mean + w @ theta[1])) < 0.03
    assert post.mean[0] == pytest.approx(REF.mean, abs=1e-9)
    assert abs(post.null_share - w @ pi) < 0.01
    rv = REF.sd**2 / REF.n  # the official baseline's own variance, apart from the candidates
    off = math.sqrt(noise.run_var / 5 + rv)
    f = post.forecasts()
    for c in range(2):
        p_above = w @ stats.norm.sf(-theta[c] / off)
        assert abs(f[c + 1].p_above_reference - p_above) < 0.01
        var = rv + w @ theta[c] ** 2 - (w @ theta[c]) ** 2
        assert post.cov[c + 1, c + 1] == pytest.approx(var, rel=0.05)


def test_a_null_heavy_family_shrinks_to_zero_and_a_wide_one_learns_its_spread():
    rng = np.random.default_rng(3)
    base = fc.ArmRuns("b", tuple(54 + 1.48 * rng.standard_normal(4)))
    wide = [fc.ArmRuns(f"c{i}", tuple(54 + 6 * rng.standard_normal() + 1.48 * rng.standard_normal(2)))
            for i in range(20)]
    null = [fc.ArmRuns(f"c{i}", tuple(54 + 1.48 * rng.standard_normal(2))) for i in range(20)]
    noise = fc.NoiseParts(1.48**2 - 1.0, 1.0)
    w = fc.posterior(base, wide, noise, REF)
    assert w.spread > 4.0 and w.null_share < 0.4
    n = fc.posterior(base, null, noise, REF)
    assert n.null_share > 0.6  # from the prior's 0.5: a slab can mimic small effects
    assert np.median(np.abs(n.mean[1:] - n.mean[0])) < 0.3  # most effects pulled to ~0
    # one candidate: the priors' centres (the small-family default)
    one = fc.posterior(base, null[:1], noise, REF)
    assert 2.0 < one.spread < 3.6 and 0.4 < one.null_share < 0.6


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
    keys = {"mean", "low80", "high80", "p_above_reference", "p_best", "p_above_baseline"}
    entries = [rep["baseline"], *rep["variants"]]
    assert {e["name"] for e in rep["variants"]} == {"a", "b", "ghost"} and any(e.get("partial") for e in entries)
    assert all(set(e["forecast"]) == keys for e in entries)
    full = [e for e in entries if e.get("n") and not e.get("partial")]
    assert all(e["forecast"]["mean"] is not None for e in full)
    assert sum(e["forecast"]["p_best"] for e in full) == pytest.approx(1.0, abs=1e-6)  # a, b, baseline: all arms
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
    # no candidate to weigh the noise nodes again: the nodes integrate sigma^2's scaled inverse
    # chi^2, i.e. a Student t on the estimate's dof (to the rule's 1e-3 in probability)
    noise = fc.NoiseParts(1.2, 1.0, dof=3.0)
    post = fc.posterior(arm("b", [55.0, 56.0]), [], noise, REF, FIXED)
    f = post.forecasts()[0]
    sd = math.sqrt(noise.run_var / 5 + 1.48**2 / 5)  # B from the reference alone, plus the official runs
    assert f.high80 - f.mean == pytest.approx(stats.t.ppf(0.9, 3.0) * sd, rel=1e-2)
    assert f.p_above_reference == pytest.approx(0.5)
    # the noise the what-ifs use: the estimate, as no candidate moved it
    assert post.noise.run_var == pytest.approx(noise.run_var, rel=1e-5)


@pytest.mark.parametrize("dof", [2.0, 3.0, 6.0, 12.0, 60.0])
def test_the_sigma_nodes_integrate_a_student_t(dof):
    from scipy.special import ndtr

    # with an eval-sampling part, the nodes below it sit on it, and their ratio says so
    nodes = fc.sigma_nodes(fc.NoiseParts(1.5, 0.7, dof=dof))
    assert sum(math.exp(n.log_weight) for n in nodes) == pytest.approx(1.0, abs=1e-12)
    assert all(n.noise.eval_var == 0.7 and n.noise.dof is None and n.noise.train_var >= 0.0 for n in nodes)
    assert all(n.noise.run_var == pytest.approx(n.ratio * 2.2) and n.noise.run_var >= 0.7 for n in nodes)
    assert min(n.ratio for n in nodes) >= 0.7 / 2.2 - 1e-12
    # without one, the scaled inverse chi^2 itself: Student's t
    nodes = fc.sigma_nodes(fc.NoiseParts(2.2, 0.0, dof=dof))
    w = np.array([math.exp(n.log_weight) for n in nodes])
    r = np.array([n.ratio for n in nodes])
    for q in (0.9, 0.99):
        z = stats.t.ppf(q, dof)
        assert w @ ndtr(z / np.sqrt(r)) == pytest.approx(q, abs=1e-3)
    assert fc.sigma_nodes(fc.NoiseParts(1.5, 0.7)) == (fc.SigmaNode(fc.NoiseParts(1.5, 0.7), 1.0, 0.0),)


@pytest.mark.parametrize("eta", [1.0, 0.25, 0.0])
def test_the_sigma_nodes_match_a_simulation_of_the_tempered_model(eta):
    # sigma^2 from the estimate's own posterior (s^2 on 6 dof), its nodes weighed by the arms' means
    # to the power eta (1: the full posterior, 0: the cut); given sigma, the level and the effects
    # importance-weighted by the arms' means. Simulated directly: 300 strata of equal prior mass in
    # sigma^2, each with its own draws; a stratum's mass is its mean weight (the arms' evidence at
    # that sigma) to the power eta, and inside it the weights are normalised. Three far-apart
    # candidates say the noise is larger than its estimate. The family's hyperparameters fixed, so
    # the only quadrature is L's and sigma's
    fam = fc.FamilyPrior(null_strength=0.0, side_strength=0.0, scale_log_sd=0.0)
    s2, nu = 2.2, 6.0
    noise = fc.NoiseParts(s2, 0.0, dof=nu)
    ref = fc.PublishedRef(54.22, math.sqrt(s2), 5, 1.0)
    runs = ([58.5], [50.0], [55.0, 51.5])
    cands = [arm(f"c{i}", ys) for i, ys in enumerate(runs)]
    post = fc.posterior(fc.ArmRuns("b"), cands, noise, ref, fam, sigma_by_arms=eta)
    rng = np.random.default_rng(23)
    strata, per = 300, 2_000
    q = (np.arange(strata) + rng.random(strata)) / strata  # one chi^2 quantile per stratum
    var = np.repeat(nu * s2 / stats.chi2.ppf(q, nu), per)
    n = var.size
    pi, rho, k = _draw_hyper(rng, fam, n)
    b = ref.mean + np.sqrt(var / ref.n) * rng.standard_normal(n)
    d = ref.offset_sd * rng.standard_normal(n)
    theta = _effects(rng, fam, pi, rho, k, (len(runs), n))
    logw = np.zeros(n)
    for c, ys in enumerate(runs):
        # the arm's mean (its scatter is in the estimate already)
        logw += -0.5 * np.log(var / len(ys)) - 0.5 * (np.mean(ys) - b - d - theta[c]) ** 2 / (var / len(ys))
    w = np.exp(logw - logw.max()).reshape(strata, per)
    evidence = w.mean(axis=1)
    mass = evidence**eta / np.sum(evidence**eta)
    w = (w / w.sum(axis=1, keepdims=True) * mass[:, None]).ravel()
    # the what-ifs' noise: 1 / E[1 / sigma^2] under the nodes' masses (s^2 itself under the estimate's own)
    assert post.noise.run_var == pytest.approx(1.0 / (w @ (1.0 / var)), rel=0.03)
    if eta == 0.0:
        assert post.noise.run_var == pytest.approx(s2, rel=1e-9)
    else:
        assert post.noise.run_var > (1.0 + 0.05 * eta) * s2  # the arms' scatter raised it
    f = post.forecasts()
    for c in range(len(runs)):
        # no local baseline run: B is the reference's alone, N(R, sigma^2 / n), apart from L (the cut)
        assert abs(post.mean[c + 1] - (ref.mean + w @ theta[c])) < 0.03
        p_above = w @ stats.norm.sf(-theta[c] / np.sqrt(var / 5 + var / ref.n))
        assert abs(f[c + 1].p_above_reference - p_above) < 0.01


def test_the_cut_keeps_the_sigma_nodes_at_their_prior_weights():
    # sigma_by_arms=0: whatever the arms' means, each noise node's mass is its estimate's weight
    fam = fc.FamilyPrior(null_strength=0.0, side_strength=0.0, scale_log_sd=0.0)
    ref = fc.PublishedRef(54.22, 1.48, 5)
    est = fc.NoiseParts(1.2, 1.0, dof=3.0)
    for ys in ((54.0, 54.2, 54.4, 54.6), (63.0, 44.0, 62.0, 45.0)):
        post = fc.posterior(arm("b", [54.0, 55.0]), [arm(f"c{i}", [y]) for i, y in enumerate(ys)], est, ref, fam,
                            sigma_by_arms=0.0)
        by_var, prior = {}, {}  # mass by the official runs' variance (nodes on the eval part's floor share one)
        for wt, ov in zip(post.mixture.weight, post.mixture.official_var):
            by_var[round(float(ov), 9)] = by_var.get(round(float(ov), 9), 0.0) + wt
        for nd in fc.sigma_nodes(est):
            key = round(nd.noise.run_var / fc.OFFICIAL_RUNS, 9)
            prior[key] = prior.get(key, 0.0) + math.exp(nd.log_weight)
        assert by_var.keys() == prior.keys()
        assert all(by_var[key] == pytest.approx(m, abs=1e-6) for key, m in prior.items())
        assert post.noise.run_var == pytest.approx(est.run_var, rel=1e-9)


def test_an_untried_idea_is_forecast_at_the_family_mean():
    fam = fc.FamilyPrior(null_share=0.0, null_strength=0.0, sides=(fc.Side(1.0, -0.5, 2.0),), side_strength=0.0,
                         scale_log_sd=0.0)
    post = fc.posterior(arm("b", [54.0, 55.0]), [fc.ArmRuns("new")], NOISE, REF, fam)
    assert post.mean[1] - post.mean[0] == pytest.approx(-0.5, abs=1e-6)
    var_effect = post.cov[1, 1] + post.cov[0, 0] - 2 * post.cov[0, 1]
    assert var_effect == pytest.approx(2.0**2, rel=1e-5)
    # half null, two sides (2/3 at N(-3, 1), 1/3 at N(2, 0.5^2)): the mixture's first two moments
    two = fc.FamilyPrior(null_share=0.5, null_strength=0.0, sides=(fc.Side(2 / 3, -3.0, 1.0), fc.Side(1 / 3, 2.0, 0.5)),
                         side_strength=0.0, scale_log_sd=0.0)
    post = fc.posterior(arm("b", [54.0, 55.0]), [fc.ArmRuns("new")], NOISE, REF, two)
    m = 0.5 * (2 / 3 * -3.0 + 1 / 3 * 2.0)
    m2 = 0.5 * (2 / 3 * (1.0 + 9.0) + 1 / 3 * (0.25 + 4.0))
    assert post.mean[1] - post.mean[0] == pytest.approx(m, abs=1e-6)
    assert post.new_mean == pytest.approx(m, abs=1e-9)
    assert post.new_sd**2 == pytest.approx(m2 - m * m, rel=1e-9)
    var_effect = post.cov[1, 1] + post.cov[0, 0] - 2 * post.cov[0, 1]
    assert var_effect == pytest.approx(m2 - m * m, rel=1e-5)
    # the family's spread: the sd of the ideas that do something, at its priors' centres
    assert two.spread == pytest.approx(math.sqrt(2 / 3 * 10.0 + 1 / 3 * 4.25 - (-4 / 3) ** 2), rel=1e-12)


def test_a_family_has_one_or_two_sides():
    with pytest.raises(ValueError):
        fc.FamilyPrior(sides=())
    with pytest.raises(ValueError):
        fc.FamilyPrior(sides=(fc.HARMFUL,) * 3)
    with pytest.raises(ValueError):  # the second side's share is the first's complement
        fc.FamilyPrior(sides=(fc.HARMFUL, fc.Side(0.5, 2.5, 0.87)))


def test_two_sides_tell_a_harmful_idea_from_a_null_one():
    # an idea seen twice 2.5 points down: under the two-sided family it is most likely harmful and
    # hardly helpful (the helpful side, N(2.5, 2^2) times the scale, reaches below 0 a little), and it is told apart more sharply than by one normal slab with the same
    # mean and sd (which keeps mass near 0); a run on the level stays most likely null
    base, runs = arm("b", [54.0, 54.4]), [arm("down", [51.7, 51.7]), arm("flat", [54.2])]
    post = fc.posterior(base, runs, NOISE, REF)
    w, slab = post.mixture.weight, post.mixture.slab
    assert w @ slab[:, 0, 0] > 0.6 and w @ slab[:, 0, 1] < 0.05
    assert 1.0 - w @ slab[:, 1].sum(axis=1) > 0.6
    one = fc.FamilyPrior(sides=(fc.Side(1.0, -1.2, fc.FamilyPrior().spread),),
                         side_strength=0.0)
    f, g = post.forecasts(), fc.posterior(base, runs, NOISE, REF, one).forecasts()
    assert f[1].mean < g[1].mean - 0.15 and f[1].p_above_reference < g[1].p_above_reference - 0.02
    assert abs(f[2].mean - f[0].mean) < 0.2 and 0.4 < f[2].p_above_reference < 0.6
