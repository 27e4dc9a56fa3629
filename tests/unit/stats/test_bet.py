"""The bet's rules as pure functions: the forecast's noise estimate and the submission rule."""

from __future__ import annotations

import numpy as np
import pytest

from opsdctl.stats import bet


def test_noise_keeps_the_published_sd_at_its_full_dof():
    # one discordant pair of baseline runs (8 points apart: SS = 32 on 1 dof) moves s^2 as 1 dof does
    s2, nu = bet.noise_estimate(32.0, 1, 1.48, 4)  # the 4 dof the verdicts give it; the forecast gives it PRIOR_DOF
    assert nu == 5
    assert s2 == pytest.approx((4 * 1.48**2 + 32.0) / 5, rel=1e-12)
    assert np.sqrt(s2) < 3.0  # the verdicts' pooling let it jump to 5.6 with the prior discounted
    # data of many dof still win: a true sd of 3 seen on 40 dof
    s2, nu = bet.noise_estimate(9.0 * 40, 40, 1.48, 4)
    assert np.sqrt(s2) == pytest.approx(np.sqrt((4 * 1.48**2 + 360.0) / 44), rel=1e-12) and np.sqrt(s2) > 2.8
    assert bet.noise_estimate(0.0, 0, None) == (None, 0.0)
    assert bet.noise_estimate(5.0, 2, None) == (2.5, 2.0)  # no prior: the local scatter alone
    assert bet.noise_estimate(0.0, 0, 1.48) == pytest.approx((1.48**2, bet.PRIOR_DOF))


def test_choose_needs_the_threshold_and_the_lead():
    m, p = [55.0, 56.0, 54.0], [0.85, 0.7, 0.99]
    assert bet.choose(m, p, 54.22, threshold=0.8) == 0  # 56 is ahead but not sure enough; 54.0 is not ahead
    assert bet.choose(m, p, 54.22, threshold=0.6) == 1
    assert bet.choose(m, p, 55.5, threshold=0.8) is None
    assert bet.choose(m, [None, None, None], 50.0) is None  # no probability: never over a baseline
    assert bet.choose(m, p, None, threshold=0.8) == 1  # nothing to beat: the highest forecast
    assert bet.choose([], [], 50.0) is None
    assert bet.choose([55.0, 55.0], [0.9, 0.9], 50.0, tie=[0.2, 0.3]) == 1
    assert bet.choose([55.0, 55.0], [0.9, 0.9], 50.0, tie=[0.3, None]) == 0


def test_p_above_baseline_is_the_normal_families_closed_form():
    # one normal side, no spike, fixed scale, the run sd known: theta | data is normal, in closed form
    from scipy.stats import norm

    from opsdctl.stats import forecast as F

    fam = F.FamilyPrior(null_share=0.0, null_strength=0.0, sides=(F.Side(1.0, 0.0, 1.0),), side_strength=0.0,
                        scale_log_sd=0.0)
    base = F.ArmRuns("b", (49.0, 51.0, 50.5, 49.5))
    cand = F.ArmRuns("c", (52.0,))
    post = F.posterior(base, [cand], F.NoiseParts(1.0, 0.0), F.PublishedRef(50.0, 1.0, 5), fam)
    v = 1.0 + 1.0 / 4  # the candidate's run against the baseline's four
    mean, var = 2.0 / (1.0 + v), v / (1.0 + v)
    assert post.p_effect_positive()[0] == pytest.approx(norm.cdf(mean / np.sqrt(var)), abs=1e-3)
    fc = post.forecasts(draws=2000)
    assert fc[0].p_above_baseline is None and fc[1].p_above_baseline == pytest.approx(norm.cdf(mean / np.sqrt(var)), abs=1e-3)


def test_a_null_spike_counts_nothing_above_the_baseline():
    from opsdctl.stats import forecast as F

    fam = F.FamilyPrior(null_share=1.0 - 1e-9, null_strength=0.0, sides=(F.Side(1.0, 0.0, 1.0),), side_strength=0.0,
                        scale_log_sd=0.0)
    post = F.posterior(F.ArmRuns("b", (50.0, 50.0)), [F.ArmRuns("c", (50.5,))], F.NoiseParts(1.0, 0.0),
                       F.PublishedRef(50.0, 1.0, 5), fam)
    assert post.p_effect_positive()[0] < 1e-6


def test_the_baseline_forecast_does_not_follow_candidates_without_local_baseline_runs():
    from opsdctl.stats import forecast as F

    noise, ref = F.NoiseParts(1.48**2, 0.0, 4.0), F.PublishedRef(54.22, 1.48, 5, 1.5)
    low = F.posterior(F.ArmRuns("b"), [F.ArmRuns(f"c{i}", (50.0, 51.0)) for i in range(4)], noise, ref)
    high = F.posterior(F.ArmRuns("b"), [F.ArmRuns(f"c{i}", (58.0, 59.0)) for i in range(4)], noise, ref)
    assert low.mean[0] == pytest.approx(54.22, abs=1e-9) and high.mean[0] == pytest.approx(54.22, abs=1e-9)


def _belief(lead=0.2, sd=1.0):
    from opsdctl.stats.belief import Belief

    # z = (B, d, D1, D2): B known well, D1 the leader short of the threshold, D2 behind
    mean = np.array([54.0, 0.0, lead, -0.5])
    cov = np.diag([0.3, 0.5, sd**2, 1.0])
    return Belief(("baseline", "a", "b"), mean, cov, 2.0, None, 0.0, 2.0)


def test_a_confirmatory_run_matches_a_direct_simulation_of_the_what_if():
    from scipy.special import ndtr

    from opsdctl.stats import forecast as F

    b = _belief()
    k, h, s2 = 3, F.obs_row(1, 3), b.s2
    rng = np.random.default_rng(5)
    n = 200_000
    x = rng.multivariate_normal(b.mean, b.cov, n)  # the state drawn from the belief
    y = x @ h + np.sqrt(s2) * rng.standard_normal(n)  # the run it would score
    sh = b.cov @ h
    v = h @ sh + s2
    post_mean = b.mean[None, :] + np.outer((y - h @ b.mean) / v, sh)  # Kalman, draw by draw
    post_cov = b.cov - np.outer(sh, sh) / v
    a = F.official_map(k)
    m = post_mean @ a.T
    c = a @ post_cov @ a.T
    sd = np.sqrt(np.diag(c)[1:] + c[0, 0] - 2 * c[0, 1:])
    i = bet.choose_many(m[:, 1:], ndtr((m[:, 1:] - m[:, :1]) / sd), m[:, 0])
    value = np.where(i >= 0, np.take_along_axis(m[:, 1:] - m[:, :1], np.maximum(i, 0)[:, None], 1)[:, 0], 0.0)
    c0 = a @ b.cov @ a.T
    sd0 = np.sqrt(np.diag(c0)[1:] + c0[0, 0] - 2 * c0[0, 1:])
    m0 = a @ b.mean
    j = bet.choose(m0[1:], ndtr((m0[1:] - m0[0]) / sd0), m0[0])
    now = 0.0 if j is None else m0[1 + j] - m0[0]
    assert j is None  # the leader is short of the threshold today
    assert b.gain_confirm(1) == pytest.approx(max(0.0, value.mean() - now), abs=4 * value.std() / np.sqrt(n) + 2e-3)
    assert b.gain_confirm(1) > 0.05


def test_a_sure_leader_needs_no_confirmation():
    sure = _belief(lead=6.0, sd=0.3)
    assert sure.gain_confirm(1) < 1e-6


def test_the_effect_posterior_is_the_normal_models_closed_form():
    # one candidate, one tau node at 1, mu ~ N(0, 1), no level error: theta ~ N(0, 2), x = theta + N(0, 1)
    w, m, sd, avg = bet.family_posterior([1.0], [1.0], 0.0, mu_sd=1.0, tau_grid=[1.0])
    assert w == pytest.approx([1.0]) and m[0, 0] == pytest.approx(2.0 / 3.0, rel=1e-12)
    assert sd[0, 0] == pytest.approx(np.sqrt(2.0 / 3.0), rel=1e-12)
    # P(effect > 0) mixes each node's normal (Student's t on nu dof) by the nodes' weights
    from scipy.stats import norm, t

    x, own = [1.0, -0.5, 0.2], [1.0, 2.0, 1.5]
    w, m, sd, avg = bet.family_posterior(x, own, 0.3)
    mean, p = bet.effect_posterior(x, own, 0.3)
    assert mean == pytest.approx(avg, rel=1e-12) and p == pytest.approx(w @ norm.cdf(m / sd), rel=1e-12)
    _, pt = bet.effect_posterior(x, own, 0.3, 4.0)
    assert pt == pytest.approx(w @ t.cdf(m / sd, 4.0), rel=1e-12)
    # the shared part (the baseline level's noise) widens every candidate but does not spread them
    m1, p1 = bet.effect_posterior([2.0, -1.0, -2.0], [1.0] * 3, 0.0)
    m2, p2 = bet.effect_posterior([2.0, -1.0, -2.0], [1.0] * 3, 2.0)
    assert p2[0] < p1[0] and np.all(np.diff(m2) < 0)


def test_a_session_of_harmful_ideas_pulls_its_lucky_one_down():
    lucky = [1.0, -2.0, -2.5, -1.5, -3.0, -2.0]  # one run each, s^2 about 2.2, a 2-run baseline
    mean, p = bet.effect_posterior(lucky, [2.2] * 6, 1.1, 5.0)
    assert p[0] < bet.P_SUBMIT and bet.choose(mean, p, 0.0) is None and mean[0] < 0.5
    winner = [4.0, 0.3, -0.4, 0.5, -0.2, 0.1]  # one idea far above nulls
    mean, p = bet.effect_posterior(winner, [2.2] * 6, 1.1, 5.0)
    assert bet.choose(mean, p, 0.0) == 0 and p[0] > 0.8


def test_the_baseline_level_weighs_local_runs_and_the_published_mean_by_precision():
    s2 = 2.0
    level, var = bet.baseline_level(52.0, 2, s2, 54.0, 5, 1.0)
    v_local, v_ref = s2 / 2, s2 / 5 + 1.0
    assert var == pytest.approx(1.0 / (1.0 / v_local + 1.0 / v_ref), rel=1e-12)
    assert level == pytest.approx((52.0 / v_local + 54.0 / v_ref) * var, rel=1e-12)
    assert bet.baseline_level(None, 0, s2, 54.0, 5, 1.0) == pytest.approx((54.0, v_ref))
    assert bet.baseline_level(52.0, 2, s2, None, 0, 1.0) == pytest.approx((52.0, v_local))
    assert bet.baseline_level(None, 0, s2, None, 0, 1.0) is None


def test_submit_reads_local_means_against_the_level():
    level = (50.0, 0.5)
    assert bet.submit([54.0, 50.5, 49.0], [2, 2, 2], level, 2.0, 5.0) == 0
    assert bet.submit([50.6, 50.5, 49.0], [1, 1, 1], level, 2.0, 5.0) is None
    assert bet.submit([], [], level, 2.0) is None


def test_one_discordant_pair_does_not_erase_the_published_sd_in_compare():
    # layout 2 + 6x1: the only local dof is a baseline pair 8 points apart
    from opsdctl.config import Reference
    from opsdctl.stats.compare import RunRecord, build_report

    runs = [RunRecord("baseline", 1, 50.0, 12, 30, None, None, False), RunRecord("baseline", 2, 58.0, 12, 30, None, None, False)]
    runs += [RunRecord(f"i{k}", 10 + k, 54.0 + d, 12, 30, None, None, False) for k, d in enumerate((0.5, -1, 1, 0, -2, 2))]
    rep = build_report(runs, baseline="baseline", reference=Reference(54.22, 1.48, 5))
    fm = rep.forecast_model
    assert fm.noise_var == pytest.approx((bet.PRIOR_DOF * 1.48**2 + 32.0) / (bet.PRIOR_DOF + 1), rel=1e-9)
    assert fm.noise_dof == bet.PRIOR_DOF + 1
    assert rep.noise.s > np.sqrt(fm.noise_var)  # the verdicts' pooling discounted the prior; the forecast's did not
    widths = [e.forecast.high80 - e.forecast.low80 for e in rep.full]
    assert max(widths) < 8.0  # were ~9.5 with the prior discounted


def test_the_family_posterior_is_the_joint_gaussians_conditioning():
    # the latent vector (mu, d, u_1..k, e_1..k) written out and conditioned in float64, per tau node
    from scipy.stats import multivariate_normal

    x, own, v_common, mu_sd = np.array([1.5, -0.3, 0.4]), np.array([1.1, 2.2, 0.7]), 0.6, 1.3
    grid = [0.5, 1.0, 2.0]
    w, mean, sd, avg = bet.family_posterior(x, own, v_common, mu_sd, 1.0, grid)
    k = x.size
    loglik = []
    for g, tau in enumerate(grid):
        cov_z = np.diag([mu_sd**2, v_common] + [tau**2] * k + list(own))
        a_theta = np.hstack([np.ones((k, 1)), np.zeros((k, 1)), np.eye(k), np.zeros((k, k))])  # theta = mu + u
        a_x = np.hstack([np.ones((k, 1)), np.ones((k, 1)), np.eye(k), np.eye(k)])  # x = mu + d + u + e
        s_xx, s_tx, s_tt = a_x @ cov_z @ a_x.T, a_theta @ cov_z @ a_x.T, a_theta @ cov_z @ a_theta.T
        m = s_tx @ np.linalg.solve(s_xx, x)
        v = s_tt - s_tx @ np.linalg.solve(s_xx, s_tx.T)
        assert mean[g] == pytest.approx(m, rel=1e-10, abs=1e-12)
        assert sd[g] == pytest.approx(np.sqrt(np.diag(v)), rel=1e-10)
        loglik.append(multivariate_normal(np.zeros(k), s_xx).logpdf(x) + np.log(1.0 / (1.0 + tau**2)))
    want = np.exp(np.array(loglik) - max(loglik))
    assert w == pytest.approx(want / want.sum(), rel=1e-9)
    assert avg == pytest.approx(w @ mean, rel=1e-12)


def test_a_shared_level_error_moves_candidates_together():
    # the same x's read against a more uncertain level: the common shift is partly the level's,
    # so every P(effect > 0) moves toward 1/2 while their order stays
    x = [2.0, 1.5, 1.8]
    _, p_sure = bet.effect_posterior(x, [1.0] * 3, 0.01)
    _, p_loose = bet.effect_posterior(x, [1.0] * 3, 4.0)
    assert np.all(p_loose < p_sure) and np.all(p_loose > 0.5)
    assert list(np.argsort(p_loose)) == list(np.argsort(p_sure))
