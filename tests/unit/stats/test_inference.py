"""opsdctl.stats.inference against scipy.stats and hand float64 computations."""

import math

import numpy as np
import pytest
from scipy import stats as ss

from opsdctl.stats import inference as stats

# ---------------------------------------------------------------- Student's t


@pytest.mark.parametrize("nu", [1, 2, 3, 4, 7, 12, 30, 200])
def test_t_cdf_and_ppf_match_scipy(nu):
    for x in (-6.0, -2.1, -0.3, 0.0, 0.7, 1.96, 4.5):
        assert stats.t_cdf(x, nu) == pytest.approx(ss.t.cdf(x, nu), rel=1e-12, abs=1e-15)
    for q in (0.001, 0.025, 0.3, 0.5, 0.9, 0.975, 0.99, 1 - 0.05 / 3):
        assert stats.t_ppf(q, nu) == pytest.approx(ss.t.ppf(q, nu), rel=1e-10, abs=1e-12)


def test_t_closed_forms_by_hand():
    # nu = 1 is Cauchy; nu = 2 has F(x) = 1/2 + x / (2 sqrt(2 + x^2)).
    for x in (-3.0, -0.5, 0.0, 0.25, 2.0):
        assert stats.t_cdf(x, 1) == pytest.approx(0.5 + math.atan(x) / math.pi, rel=1e-13)
        assert stats.t_cdf(x, 2) == pytest.approx(0.5 + x / (2 * math.sqrt(2 + x * x)), rel=1e-13)
    for p in (0.05, 0.4, 0.975):
        assert stats.t_ppf(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-12)
        assert stats.t_ppf(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)


def test_t_refuses_zero_dof():
    with pytest.raises(ValueError):
        stats.t_cdf(1.0, 0)
    with pytest.raises(ValueError):
        stats.t_ppf(0.9, 0)


# ---------------------------------------------------------------- y_r and V_r


def test_score_and_eval_variance_on_known_counts():
    counts, k = (0, 6, 12, 3), 12
    assert stats.run_score(counts, k) == pytest.approx(100 / 4 * (0 + 6 + 12 + 3) / 12, rel=1e-15)
    # c(k - c): 0, 36, 0, 27 -> sum 63; V = 100^2 / 4^2 * 63 / (12^2 * 11)
    assert stats.eval_variance(counts, k) == pytest.approx(10000 / 16 * 63 / (144 * 11), rel=1e-15)
    assert stats.eval_variance((0, 0, 0), 12) == 0.0 and stats.eval_variance((12, 12), 12) == 0.0
    # k = 2, one problem with one correct: c(k - c)/(k^2 (k-1)) = 1/4, times 100^2
    assert stats.eval_variance((1,), 2) == pytest.approx(2500.0)


def test_eval_variance_is_unbiased():
    # E[V_r] must equal Var(y_r) = 100^2/n^2 sum_i p_i (1 - p_i) / k under binomial sampling.
    rng = np.random.default_rng(0)
    n, k, reps = 30, 12, 40000
    p = rng.beta(0.6, 0.5, n)
    c = rng.binomial(k, p, size=(reps, n))
    v = 1e4 / n**2 * np.sum(c * (k - c), axis=1) / (k**2 * (k - 1))
    exact = 1e4 / n**2 * np.sum(p * (1 - p)) / k
    assert v.mean() == pytest.approx(exact, rel=0.01)
    assert stats.eval_variance(c[0], k) == pytest.approx(v[0], rel=1e-14)
    y = 100 * c.mean(axis=1) / k
    assert y.var(ddof=1) == pytest.approx(exact, rel=0.03)


def test_counts_validation():
    with pytest.raises(ValueError):
        stats.eval_variance((1, 0), 1)  # k = 1: no variance estimate
    with pytest.raises(ValueError):
        stats.eval_variance((13,), 12)
    with pytest.raises(ValueError):
        stats.run_score((), 12)


# ---------------------------------------------------------------- pooled variance


def pooled(groups, prior_sd=None, prior_dof=0, weight=1.0):
    """The live pooling (build_report): the local scatter, then the prior's dof at its weight."""
    return stats.pooled_with_weight(*stats.within_ss(groups), prior_sd, prior_dof, weight)


def test_pooled_variance_without_prior_by_hand():
    # group 1: mean 2, SS 2; group 2: mean 5, SS 2; single run adds nothing. nu = 2 + 1 = 3.
    s2, nu = pooled([[1.0, 2.0, 3.0], [4.0, 6.0], [9.0]])
    assert nu == 3 and s2 == pytest.approx(4.0 / 3.0, rel=1e-15)


def test_pooled_variance_with_prior_by_hand():
    s2, nu = pooled([[1.0, 2.0, 3.0], [4.0, 6.0]], prior_sd=1.48, prior_dof=4)
    assert nu == 7 and s2 == pytest.approx((4 * 1.48**2 + 4.0) / 7, rel=1e-15)
    # single runs only: the prior alone
    s2, nu = pooled([[50.0], [53.0]], prior_sd=1.48, prior_dof=4)
    assert nu == 4 and s2 == pytest.approx(1.48**2, rel=1e-15)
    # a down-weighted prior keeps its share of the dof
    s2, nu = pooled([[1.0, 2.0, 3.0], [4.0, 6.0]], prior_sd=1.48, prior_dof=4, weight=0.25)
    assert nu == 4 and s2 == pytest.approx((1 * 1.48**2 + 4.0) / 4, rel=1e-15)


def test_pooled_variance_no_prior_single_runs_has_no_estimate():
    assert pooled([[50.0], [53.0], []]) == (None, 0)


def test_full_weight_scatter_is_where_the_check_reaches_its_full_weight_level():
    for nu_local, nu0 in ((1, 4), (2, 4), (6, 4), (30, 9)):
        s = stats.full_weight_scatter(nu_local, 1.48, nu0)
        assert s == pytest.approx(1.48 * math.sqrt(ss.f.ppf(1 - stats.PRIOR_FULL_AT, nu_local, nu0)), rel=1e-10)
        at = stats.prior_check(nu_local * s**2, nu_local, 1.48, nu0)
        assert at.p == pytest.approx(stats.PRIOR_FULL_AT, rel=1e-9)
        assert stats.prior_check(nu_local * (0.999 * s) ** 2, nu_local, 1.48, nu0).weight == 1.0
        assert stats.prior_check(nu_local * (1.001 * s) ** 2, nu_local, 1.48, nu0).weight < 1.0
    assert stats.full_weight_scatter(2, 1.48, 4) < 1.40 < 1.48  # the reported case: below s0, not full weight


def test_prior_from_reference():
    assert stats.prior_from_reference(1.48, 5) == (1.48, 4)
    assert stats.prior_from_reference(1.48, 5, use=False) == (None, 0)
    assert stats.prior_from_reference(1.48, 1) == (None, 0)
    assert stats.prior_from_reference(None, None) == (None, 0)


# ---------------------------------------------------------------- delta, CI, P(beat), verdict


def test_compare_means_against_scipy():
    d = stats.compare_means(57.0, 3, 54.22, 1.5**2 / 5, 1.5**2, 10)  # a baseline of 5 local runs
    se = 1.5 * math.sqrt(1 / 3 + 1 / 5)
    half = ss.t.ppf(0.975, 10) * se
    assert d.delta == pytest.approx(2.78, rel=1e-13)
    assert d.se == pytest.approx(se, rel=1e-15)
    assert (d.ci_low, d.ci_high) == (pytest.approx(2.78 - half, rel=1e-12), pytest.approx(2.78 + half, rel=1e-12))
    assert d.p_beat == pytest.approx(ss.t.cdf(2.78 / se, 10), rel=1e-12)


def test_compare_means_without_noise_estimate_and_zero_noise():
    d = stats.compare_means(56.0, 1, 54.0, None, None, 0)
    assert d.delta == 2.0 and d.se is None and d.p_beat is None and d.ci_low is None
    assert stats.compare_means(56.0, 2, 54.0, 0.0, 0.0, 2).p_beat == 1.0
    assert stats.compare_means(54.0, 2, 54.0, 0.0, 0.0, 2).p_beat == 0.5
    assert stats.compare_means(53.0, 2, 54.0, 0.0, 0.0, 2).p_beat == 0.0


# ---------------------------------------------------------------- noise split


def test_noise_split():
    ns = stats.noise_split(2.25, [1.0, 2.0, 3.0])
    assert ns.v_eval == 2.0 and ns.tau2 == pytest.approx(0.25) and ns.eval_dominates
    ns = stats.noise_split(2.25, [0.5])
    assert ns.tau2 == pytest.approx(1.75) and not ns.eval_dominates
    assert stats.noise_split(1.0, [3.0]).tau2 == 0.0  # clipped at zero
    assert stats.noise_split(None, [1.0]) == stats.NoiseSplit(None, 1.0, None)
    assert stats.noise_split(2.0, []) == stats.NoiseSplit(None, None, None)


# ---------------------------------------------------------------- paired by problem


def test_paired_problem_se_by_hand():
    cand = [[0.5, 1.0, 0.25], [0.75, 1.0, 0.25]]  # run-averaged: 0.625, 1.0, 0.25
    base = [[0.5, 0.5, 0.5]]
    got = stats.paired_problem_se(cand, base)
    d = [12.5, 50.0, -25.0]
    mean = sum(d) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
    assert got.n_problems == 3
    assert got.delta == pytest.approx(mean, rel=1e-14)
    assert got.se == pytest.approx(sd / math.sqrt(3), rel=1e-14)
    assert stats.paired_problem_se([[0.5]], [[0.25]]) is None
    with pytest.raises(ValueError):
        stats.paired_problem_se([[0.5, 0.5]], [[0.5]])


# ---------------------------------------------------------------- futility (planner)


def test_futility_rule():
    assert stats.futility_z() == pytest.approx(ss.norm.ppf(1 - 0.05 / 3), rel=1e-12)
    assert round(stats.futility_z(), 2) == 2.13
    se = stats.futility_se(0.5, 4.0, 2.25, 5)
    assert se == pytest.approx(math.sqrt(0.5 + 4.0 + 0.45))
    assert stats.futility_stop(-6.0, 2.0) and not stats.futility_stop(-4.0, 2.0)


# ---------------------------------------------------------------- prior check, offset, the rule


def test_prior_check_against_scipy():
    got = stats.prior_check(30.0, 6, 1.48, 4)
    p = ss.f.sf(30.0 / 6 / 1.48**2, 6, 4)  # s0 is itself an estimate on 4 dof: F, not chi-square
    assert got.chi2 == pytest.approx(30.0 / 1.48**2) and got.p == pytest.approx(p, rel=1e-12)
    assert got.s_local == pytest.approx(math.sqrt(5.0)) and got.weight == pytest.approx(min(1.0, p / 0.5))
    assert stats.prior_check(60.0, 6, 1.48, 4).weight < 0.2  # s_local 3.2 vs 1.48: little weight left
    assert stats.prior_check(3.0, 6, 1.48, 4).weight == 1.0  # smaller scatter: the prior is conservative
    unchecked = stats.prior_check(0.0, 0, 1.48, 4)
    assert unchecked.kept and unchecked.weight == 1.0 and unchecked.p is None  # nothing to check it with yet
    assert not stats.prior_check(10.0, 3, None, 0).kept
    # smooth in the evidence: no jump anywhere along a fine grid of local scatters
    ws = stats.prior_weight(np.linspace(0.0, 200.0, 4001), 6, 1.48, 4)
    assert np.all(np.diff(ws) <= 0) and np.max(np.abs(np.diff(ws))) < 0.01
    assert stats.within_ss([[1.0, 2.0, 3.0], [4.0, 6.0], [9.0]]) == (4.0, 3)


def test_offset_sd_seen_by_hand():
    assert stats.offset_sd_seen(0.5, 1.0, 1.0) == pytest.approx(1.0)  # explained by sampling: as configured
    assert stats.offset_sd_seen(3.0, 1.0, 1.0) == pytest.approx(math.sqrt(1.0 + 9.0 - 1.0))
    xs = np.linspace(-6, 6, 1201)
    assert np.max(np.abs(np.diff(stats.offset_sd_seen(xs, 1.3, 1.0)))) < 0.02  # continuous


def test_reference_check_against_scipy():
    rc = stats.reference_check(56.0, 3, 54.22, 5, 1.5, 9)
    se = 1.5 * math.sqrt(1 / 3 + 1 / 5)
    assert rc.diff == pytest.approx(1.78) and rc.se == pytest.approx(se)
    assert rc.p == pytest.approx(2 * ss.t.sf(1.78 / se, 9), rel=1e-12)
    half = ss.t.ppf(0.975, 9) * se
    assert (rc.ci_low, rc.ci_high) == (pytest.approx(1.78 - half), pytest.approx(1.78 + half))
    assert rc.significant == (rc.p < 0.05)
    assert stats.reference_check(60.0, 3, 54.22, 5, 1.5, 9).significant
    assert stats.reference_check(56.0, 0, 54.22, 5, 1.5, 9) is None


def test_baseline_mean_and_variance_by_hand():
    s2, o = 2.19, 1.0
    v_ref = s2 / 5 + o**2
    assert stats.baseline_var(s2, 0, 5, o, True) == pytest.approx(v_ref)
    assert stats.baseline_var(s2, 3, 5, o, True) == pytest.approx(1 / (3 / s2 + 1 / v_ref))
    assert stats.baseline_var(s2, 3, 5, o, False) == pytest.approx(s2 / 3)
    assert stats.baseline_var(s2, 0, None, o, False) is None
    w_l, w_r = 3 / s2, 1 / v_ref
    assert stats.baseline_mean(56.0, 3, s2, 54.22, 5, o, True) == pytest.approx((w_l * 56.0 + w_r * 54.22) / (w_l + w_r))
    assert stats.baseline_mean(56.0, 3, s2, 54.22, 5, o, False) == 56.0
    assert stats.baseline_mean(None, 0, s2, 54.22, 5, o, True) == 54.22


def test_upper_t_is_exact_for_tiny_levels():
    for nu in (3, 8, 40):
        for a in (0.05, 1e-4, 1e-12):
            assert stats.upper_t(a, nu) == pytest.approx(ss.t.isf(a, nu), rel=1e-9)


def test_look_level_and_rule_verdict():
    from opsdctl.stats import sequential

    assert stats.look_level(6, 2, 3) == 0.0  # 3 local dof: the prior is not checked yet
    assert stats.look_level(3, 1, 10) == 0.0  # 3 local runs in the comparison
    assert stats.look_level(6, 2, 4) == pytest.approx(sequential.nominal_level(6, 0.025))
    lvl = 0.01
    c = ss.t.isf(lvl, 8)
    assert stats.rule_verdict(c * 1.0001, 1.0, 8, lvl) == "better"
    assert stats.rule_verdict(c * 0.9999, 1.0, 8, lvl) == "undecided"
    assert stats.rule_verdict(-c * 1.0001, 1.0, 8, lvl) == "worse"
    assert stats.rule_verdict(5.0, 1.0, 8, 0.0) == "undecided" and stats.rule_verdict(5.0, None, 8, lvl) == "undecided"


def test_rule_runs_needed_is_the_first_r_that_settles():
    for delta, n_v, n_b in [(2.5, 2, 3), (3.5, 1, 0), (-2.5, 2, 3), (1.5, 2, 2)]:
        arms = stats.Arms(1.48, n_v, n_b, 4 + (n_v - 1) + max(0, n_b - 1), 4, 2, 5, 1.0, True)
        got = stats.rule_runs_needed(delta, arms)
        if got.extra is not None:
            assert arms.with_runs(got.extra, 0).settles(delta)
            assert all(not arms.with_runs(r, 0).settles(delta) for r in range(got.extra))
        else:
            assert got.needs_baseline_runs and got.both_arms is not None
            assert arms.with_runs(got.both_arms, got.both_arms).settles(delta)
            assert all(not arms.with_runs(r, 0).settles(delta) for r in range(1, stats.MAX_RULE_RUNS + 1))
    # against the reference only, the SE has a floor: +2 points never settles on candidate runs
    ref_only = stats.Arms(1.48, 2, 0, 5, 4, 1, 5, 1.0, True)
    got = stats.rule_runs_needed(2.0, ref_only)
    assert got.extra is None and got.needs_baseline_runs and got.both_arms >= 1
    assert stats.rule_runs_needed(0.0, ref_only).extra is None


def test_the_runs_needed_search_on_arrays_is_the_scalar_search():
    """rule_runs_needed asks Arms.settles_after for every r at once; each element must be what
    with_runs(r, .).settles gives, and the search what a plain loop over r finds."""
    rng = np.random.default_rng(11)
    r = np.arange(1, stats.MAX_RULE_RUNS + 1)
    for _ in range(60):
        n_v, n_b = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        use_ref = bool(rng.integers(0, 2)) or n_b == 0
        local = max(0, n_v - 1) + max(0, n_b - 1)
        arms = stats.Arms(float(rng.uniform(0.8, 3.0)), n_v, n_b, local + int(rng.integers(0, 5)), local,
                          int(rng.integers(1, 7)), 5 if use_ref else None, float(rng.uniform(0.0, 1.5)), use_ref)
        delta = float(rng.choice([-1, 1]) * rng.uniform(0.3, 5.0))
        for both in (False, True):
            want = [arms.with_runs(int(k), int(k) if both else 0).settles(delta) for k in r]
            assert arms.settles_after(delta, r, both).tolist() == want
        loop = next((k for k in range(1, stats.MAX_RULE_RUNS + 1) if arms.with_runs(k, 0).settles(delta)), None)
        both = next((k for k in range(1, stats.MAX_RULE_RUNS + 1) if arms.with_runs(k, k).settles(delta)), None)
        got = stats.rule_runs_needed(delta, arms)
        if arms.settles(delta):
            assert got == stats.RuleRunsNeeded(None)
        else:
            assert got == (stats.RuleRunsNeeded(loop) if loop else stats.RuleRunsNeeded(None, True, both))


def test_the_array_path_is_the_scalar_path_element_by_element():
    """sim.operating calls the rule's functions on arrays over studies; each element must be what
    the scalar call (build_report's) gives, bit for bit."""
    rng = np.random.default_rng(7)
    groups = [rng.normal(54.0, 1.5, (200, n)) for n in (3, 2, 1, 4)]
    ss, nu_l = stats.within_ss(groups)
    for i in range(200):
        assert (float(ss[i]), nu_l) == stats.within_ss([g[i] for g in groups])
    w = stats.prior_weight(ss, nu_l, 1.48, 4)
    w[:5] = 0.0  # no prior weight left
    for s0, nu0 in ((1.48, 4), (None, 0)):
        s2, nu = stats.pooled_with_weight(ss, nu_l, s0, nu0, w)
        for i in range(200):
            assert (float(s2[i]), float(nu[i])) == stats.pooled_with_weight(float(ss[i]), nu_l, s0, nu0, float(w[i]))
    # no dof at all: NaN in the array, None for the scalar
    s2, nu = stats.pooled_with_weight(np.zeros(3), 0, 1.48, 4, np.zeros(3))
    assert np.isnan(s2).all() and (nu == 0).all() and stats.pooled_with_weight(0.0, 0, 1.48, 4, 0.0) == (None, 0)
    s2, var_b = rng.uniform(0.5, 4.0, 200), rng.uniform(0.0, 2.0, 200)
    se = stats.se_delta(s2, 3, var_b)
    assert all(float(se[i]) == stats.se_delta(float(s2[i]), 3, float(var_b[i])) for i in range(200))
    s = rng.uniform(0.5, 2.0, 200)
    assert all(float(stats.reference_se(s, 3, 5)[i]) == stats.reference_se(float(s[i]), 3, 5) for i in range(200))
    # verdicts: around both thresholds, SE = 0 of each sign, no dof, fractional dof
    delta = np.concatenate([rng.normal(0.0, 4.0, 200), [1.0, -1.0, 0.0, 3.0]])
    se = np.concatenate([rng.uniform(0.5, 1.5, 200), [0.0, 0.0, 0.0, 1.0]])
    nu = np.concatenate([rng.uniform(0.0, 12.0, 200), [5.0, 5.0, 5.0, 0.0]])
    nu[:3] = 0.0
    names = {1: "better", -1: "worse", 0: "undecided"}
    for level in (0.01, 0.2, 0.0):
        codes = stats.verdict_code(delta, se, nu, level)
        scalar = [stats.rule_verdict(float(d), float(e), float(n), level) for d, e, n in zip(delta, se, nu)]
        assert [names[c] for c in codes] == scalar
        assert level == 0.0 or {"better", "worse", "undecided"} == set(scalar)
    levels = rng.choice([0.0, 0.01, 0.2], delta.size)  # a level per element (one per look)
    codes = stats.verdict_code(delta, se, nu, levels)
    assert [names[c] for c in codes] == [stats.rule_verdict(float(d), float(e), float(n), float(lv))
                                         for d, e, n, lv in zip(delta, se, nu, levels)]
