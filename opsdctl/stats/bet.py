"""The bet's two rules that must hold in any world: the noise it forecasts with, and what to submit.

Pure functions of numbers and arrays; `compare` (the forecast's noise), `plan.submission`
(`pick_leader`) and benchmarks/worlds.py (the world suite) call these same functions.

The noise. The forecast's run variance pools the local within-arm scatter with the published sd
as a prior worth PRIOR_DOF degrees of freedom, always: s^2 = (nu0 s0^2 + SS) / (nu0 + nu_local).
The verdicts' pooling (opsdctl.stats.inference.prior_check) lets the local scatter discount the
prior; one discordant pair of baseline runs then left it 0.13 of its 4 dof and the forecast's
intervals tripled. Here data move s^2 as data of their dof do, no more. Why 2 of the published
sd's 4 dof: it was measured on the official setup, not yours, and at 4 a true sd of 3.0 kept the
estimate near 1.48 through a session's 1-4 local dof (80% intervals covered 67-75% of arms on the
world suite's tune seeds; at 2, 71-80%, and the other worlds unchanged).

The submission. Each candidate's effect (its official mean minus the baseline's) under a normal
family learned from the session's own candidates (`effect_posterior`): the exact Gaussian model
x_c = theta_c + d + e_c, where x_c is the candidate's local mean minus the baseline's level, d the
level's error (one draw every candidate shares), theta_c ~ N(mu, tau^2), mu ~ N(0, MU_SD^2) and tau
weighed over a grid from TAU_MIN by its likelihood. A candidate is submitted only when its
P(effect > 0) is at least P_SUBMIT, the highest posterior mean of those; else the baseline's empty
recipe (`choose`). The baseline's local level combines its local runs with the published mean
(the setup offset's sd between them: `baseline_level`), so two unlucky baseline runs do not make
every idea look good; and since d is shared, a shift common to every candidate is split between
the level's error and the family's mean by their prior variances rather than averaged away.
Why not the forecast's mean (the spike and slab of opsdctl.stats.forecast): its family is fixed
in advance, so in a session of mostly harmful ideas a lucky one sits on the spike at 0 and wins by
a hair (mean -0.2 to -0.45 points, worse by more than a point in 12-24% of sessions), and a
threshold on its P(effect > 0) cost the winners instead. MU_SD, TAU_MIN, TAU_SCALE and P_SUBMIT
were chosen on the world suite's tuning seeds (benchmarks/worlds.py --split tune --rows, re-scored
by benchmarks/bet_offline.py; docs/decision.md has the figures) and are reported on others.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

PRIOR_DOF = 2.0  # the published sd's weight, dof (of the 4 its 5 re-trains have): chosen on the world suite
P_SUBMIT = 0.65  # a candidate is submitted only at P(effect > 0) >= this
MU_SD = 1.5  # the family mean's prior sd around 0, points: a handful of ideas moves it, one does not
TAU_MIN = 1.0  # the family's sd is at least this, points: a real idea may stand out of a quiet family
TAU_SCALE = 1.0  # the half-Cauchy prior's scale on the family's sd, points
TAU_MAX, TAU_NODES = 8.0, 20  # the family sd's grid: TAU_NODES log-spaced nodes from TAU_MIN to this, points


def noise_estimate(ss_local: float, nu_local: int, s0: Optional[float], nu0: float = PRIOR_DOF) -> tuple[Optional[float], float]:
    """(s^2, dof) of the run-to-run variance for the forecast: the local scatter SS on nu_local dof
    pooled with the published sd s0 at a fixed nu0 dof (None: no prior). (None, 0) with neither."""
    prior = float(nu0) if s0 is not None and s0 > 0 and nu0 > 0 else 0.0
    nu = prior + int(nu_local)
    if nu <= 0:
        return None, 0.0
    return (prior * float(s0 or 0.0) ** 2 + float(ss_local)) / nu, nu


def tau_nodes(tau_min: float = TAU_MIN) -> np.ndarray:
    """The family sd's grid: TAU_NODES log-spaced nodes from tau_min to TAU_MAX, points."""
    return np.geomspace(tau_min, TAU_MAX, TAU_NODES)


def family_posterior(x: Sequence[float], v_own: Sequence[float], v_common: float, mu_sd: float = MU_SD,
                     tau_scale: float = TAU_SCALE, tau_grid: Optional[Sequence[float]] = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The exact Gaussian model behind the bet, on a grid of the family's sd: x_c = theta_c + d + e_c
    with theta_c = mu + u_c, u_c ~ N(0, tau^2), mu ~ N(0, mu_sd^2), d ~ N(0, v_common) the baseline
    level's error (ONE draw shared by every x: it shifts them together, never spreads them) and
    e_c ~ N(0, v_own_c). Given tau the candidates' effects are jointly normal: with
    C = mu_sd^2 11' + tau^2 I (their covariance, and theirs with x) and S = C + v_common 11' +
    diag(v_own), E[theta | x] = C S^-1 x and Cov = C - C S^-1 C. tau is weighed by the marginal
    likelihood N(x; 0, S) times a half-Cauchy(tau_scale) prior on the grid. Returns (weights over
    the grid, means (grid, k), sds (grid, k), the posterior means averaged over the grid).
    Why a shared d and not d's variance added to each x: a common shift of every candidate is
    either the level's error or the family's mean, and the model splits it between the two by
    their prior variances; added per candidate, six once-run ideas would average d away."""
    x = np.asarray(x, dtype=np.float64)
    own = np.asarray(v_own, dtype=np.float64)
    k = x.size
    tau = tau_nodes() if tau_grid is None else np.asarray(tau_grid, dtype=np.float64)
    if k == 0:
        return np.ones(1), np.zeros((1, 0)), np.zeros((1, 0)), np.zeros(0)
    one = np.ones((k, k))
    c = mu_sd**2 * one[None] + tau[:, None, None] ** 2 * np.eye(k)[None]
    s = c + float(v_common) * one[None] + np.diag(own)[None]
    chol = np.linalg.cholesky(s)
    sinv_x = np.linalg.solve(s, x[None, :, None])[..., 0]
    sinv_c = np.linalg.solve(s, c)
    mean = np.einsum("gij,gj->gi", c, sinv_x)
    var = np.diagonal(c, axis1=1, axis2=2) - np.einsum("gij,gji->gi", c, sinv_c)
    loglik = -0.5 * (sinv_x @ x) - np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
    logw = loglik - np.log1p((tau / tau_scale) ** 2)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    return w, mean, np.sqrt(np.maximum(var, 1e-300)), w @ mean


def effect_posterior(x: Sequence[float], v_own: Sequence[float], v_common: float, nu: Optional[float] = None,
                     mu_sd: float = MU_SD, tau_scale: float = TAU_SCALE, tau_min: float = TAU_MIN
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's posterior mean effect and P(effect > 0) under family_posterior's model:
    per grid node a normal (Student's t on nu dof when the noise is an estimate), mixed by the
    nodes' weights."""
    from opsdctl.stats.special import ndtr, stdtr

    w, m, sd, mean = family_posterior(x, v_own, v_common, mu_sd, tau_scale, tau_nodes(tau_min))
    z = m / sd
    p = stdtr(float(nu), z) if nu else ndtr(z)
    return mean, w @ p


def baseline_level(local_mean: Optional[float], n_local: int, s2: float, reference_mean: Optional[float],
                   reference_n: int, offset_sd: float) -> Optional[tuple[float, float]]:
    """(level, variance) of the baseline on the local setup, what the candidates' local means are
    read against: its local runs' mean (s^2 / n) and the published mean (s^2 / n_ref + offset_sd^2:
    the setup may sit offset_sd away) by precision; either alone when the other is missing."""
    parts = []
    if local_mean is not None and n_local > 0:
        parts.append((float(local_mean), s2 / n_local))
    if reference_mean is not None and reference_n > 0:
        parts.append((float(reference_mean), s2 / reference_n + float(offset_sd) ** 2))
    if not parts:
        return None
    w = np.array([1.0 / max(v, 1e-12) for _, v in parts])
    return float(w @ np.array([m for m, _ in parts]) / w.sum()), float(1.0 / w.sum())


def submit(local_means: Sequence[float], runs: Sequence[int], level: tuple[float, float], s2: float,
           nu: Optional[float] = None, tie: Optional[Sequence[Optional[float]]] = None) -> Optional[int]:
    """The submission rule: of candidates with these local means and run counts, read against the
    baseline's `level` (baseline_level) with run variance s^2 on nu dof, the index to submit (None:
    the baseline)."""
    if not len(local_means):
        return None
    x = np.asarray(local_means, dtype=np.float64) - level[0]
    mean, p = effect_posterior(x, [s2 / max(1, int(n)) for n in runs], level[1], nu)
    return choose(mean, p, 0.0, P_SUBMIT, tie)


def choose(forecast_mean: Sequence[float], p_above_baseline: Sequence[Optional[float]],
           baseline_mean: Optional[float], threshold: float = P_SUBMIT,
           tie: Optional[Sequence[Optional[float]]] = None) -> Optional[int]:
    """The submission rule on arrays: the index of the candidate to submit, None for the baseline.
    `forecast_mean`: each candidate's forecast official mean; `p_above_baseline`: its P(official
    mean > the baseline's) (None: unknown, never submitted over a baseline); `baseline_mean`: the
    baseline's forecast (None: nothing to beat, the highest forecast is submitted); `tie`: what
    breaks a tie on the mean, higher first (p_best; None counts 0)."""
    m = np.asarray(forecast_mean, dtype=np.float64)
    if m.size == 0:
        return None
    nothing = baseline_mean is None
    p = np.array([-1.0 if x is None else float(x) for x in p_above_baseline]) if not nothing else np.ones(m.size)
    t = np.zeros(m.size) if tie is None else np.array([0.0 if x is None else float(x) for x in tie])
    i = int(choose_many(m[None, :], p[None, :], np.array([-np.inf if nothing else float(baseline_mean)]),
                        threshold, t[None, :])[0])
    return None if i < 0 else i


def choose_many(mean: np.ndarray, p: np.ndarray, baseline: np.ndarray, threshold: float = P_SUBMIT,
                tie: Optional[np.ndarray] = None) -> np.ndarray:
    """`choose` over many scenarios at once (rows): mean, p (scenarios, candidates), baseline
    (scenarios,); the chosen candidate's index per row, -1 for the baseline. What advise's
    what-ifs decide with (opsdctl.stats.knowledge_gradient.thresholded_gain)."""
    ok = (p >= threshold) & (mean > baseline[:, None])
    m = np.where(ok, mean, -np.inf)
    best = m.max(axis=1, keepdims=True)
    if tie is None:
        idx = np.argmax(m, axis=1)
    else:  # among the highest means, the highest tie (the first of equals)
        idx = np.argmax(np.where(m == best, tie, -np.inf), axis=1)
    return np.where(ok.any(axis=1), idx, -1)
