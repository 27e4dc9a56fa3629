"""The forecast of the official score: what each arm's mean of 5 official re-trains will be.

The researcher is scored on one number, the mean of OFFICIAL_RUNS official re-trains of what
they submit, against the published reference. This module turns the local runs into a joint
predictive distribution of that number for the baseline and every candidate. Pure functions of
arrays and frozen dataclasses; no store, no I/O. Points throughout, variances in points^2.

The generative model (docs/decision.md):

    B          the official baseline's true mean                 flat prior
    d          the user's setup offset (local - official)        flat with local baseline runs and a
                                                                 reference, else N(0, offset_sd^2)
    theta_c    candidate c's effect                              N(m, tau^2), m ~ N(mean, mean_sd^2)
    R          the published reference mean = B + N(0, ref_sd^2 / ref_n)
    local run r of arm a:  y = B + d + theta_a + N(0, train_var + V_r)   (theta_baseline = 0)
    official run of arm a: B + theta_a + N(0, train_var + eval_var)

V_r is the run's own eval-sampling variance (binomial, from its per-problem counts), train_var
the training part of the run-to-run noise, eval_var the eval-sampling variance of one full
evaluation (a run without counts gets train_var + eval_var). The official score depends on B
alone, and local baseline runs see B + d: with a prior on d they would lend B part of any setup
offset, so whenever local baseline runs and the published reference can both measure d it gets
no prior, B comes from the reference and the local runs measure the effects (a +2-point offset
under a 1-point prior had every forecast ~1 point optimistic; the prior sharpened B only from
0.66 to 0.60 points). The effects share one family:
the spread tau is integrated over a log grid with a log-normal prior centred on
DEFAULT_SPREAD (the data decide once the family is large enough), and the family mean m with
its normal prior is integrated out in closed form. Given tau the model is linear-Gaussian, so
the posterior of x = (B, d, theta_1..theta_C) is exact; the tau mixture is summarised by its
first two moments, so what comes out is one Gaussian: `Posterior.mean` / `Posterior.cov` of
the arms' true official means, and the predictive adds the official runs' own noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np

OFFICIAL_RUNS = 5  # the scorer re-trains 5 times (seed 42) and averages
DEFAULT_SPREAD = 2.0  # points: sd of effects across ideas (a realistic mix: half null, a third -1..-5, rest +1..+4)
SPREAD_PRIOR_LOG_SD = 0.75  # sd of log(tau) around log(DEFAULT_SPREAD): 80% of the prior mass in 0.76..5.2 points
SPREAD_GRID = (0.05, 12.0, 41)  # tau grid: log-spaced from, to, points
FAMILY_MEAN = -0.5  # points: prior centre of the family's mean effect (that mix: most ideas do not help; mean -0.58)
FAMILY_MEAN_SD = 1.0  # points: prior sd of the family's mean effect
INTERVAL = 0.80  # the forecast interval's coverage
BEST_DRAWS = 60_000  # Monte Carlo draws for p_best: SE <= 0.5 / sqrt(draws) = 0.002
BEST_SEED = 25  # fixed: the same store gives the same p_best


@dataclass(frozen=True)
class ArmRuns:
    """One arm's full local runs: scores (points) and each run's eval-sampling variance V_r
    (points^2; None when the run has no per-problem counts)."""

    name: str
    scores: tuple[float, ...] = ()
    eval_vars: tuple[Optional[float], ...] = ()


@dataclass(frozen=True)
class NoiseParts:
    """The run-to-run noise split: train_var (re-training) + eval_var (one full eval's sampling).
    dof: the degrees of freedom of the estimate they split (None: known), for a Student t predictive."""

    train_var: float
    eval_var: float
    dof: Optional[float] = None

    @property
    def run_var(self) -> float:
        """Variance of one official run (a full train + full eval)."""
        return self.train_var + self.eval_var


@dataclass(frozen=True)
class PublishedRef:
    """The published baseline: mean of n official runs with sd `sd`; the user's setup may sit
    offset_sd (1 sd) away from it (the offset's prior while no local baseline run measures it)."""

    mean: float
    sd: float
    n: int
    offset_sd: float = 1.0


@dataclass(frozen=True)
class FamilyPrior:
    spread: float = DEFAULT_SPREAD  # centre of the prior on tau
    spread_log_sd: float = SPREAD_PRIOR_LOG_SD  # 0: tau fixed at `spread`
    mean: float = FAMILY_MEAN
    mean_sd: float = FAMILY_MEAN_SD


@dataclass(frozen=True)
class ArmForecast:
    """The `forecast` of one arm in compare --json (points)."""

    mean: float
    low80: float
    high80: float
    p_above_reference: Optional[float]
    p_best: float

    def to_json(self) -> dict:
        return {"mean": self.mean, "low80": self.low80, "high80": self.high80,
                "p_above_reference": self.p_above_reference, "p_best": self.p_best}


@dataclass(frozen=True)
class Posterior:
    """The joint posterior of the arms' true official means (arm 0 is the baseline).

    mean, cov: of M_a = B + theta_a, the arms' true official means (points, points^2).
    state_mean, state_cov: of x = (B, d, theta_1..theta_C), for what-if updates (`after_runs`).
    noise: the per-run components; official runs add noise.run_var / OFFICIAL_RUNS to each arm.
    spread: posterior mean of tau (points); spread_sd its posterior sd.
    """

    names: tuple[str, ...]
    mean: np.ndarray
    cov: np.ndarray
    state_mean: np.ndarray
    state_cov: np.ndarray
    noise: NoiseParts
    spread: float
    spread_sd: float
    reference_mean: Optional[float]
    official_runs: int = OFFICIAL_RUNS

    def predictive_mean(self) -> np.ndarray:
        return self.mean

    def predictive_cov(self) -> np.ndarray:
        """Covariance of the arms' official OFFICIAL_RUNS-run means (true mean + their noise)."""
        return self.cov + np.eye(len(self.names)) * (self.noise.run_var / self.official_runs)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def after_runs(self, arm: int, runs: int = 1, eval_var: Optional[float] = None) -> np.ndarray:
        """The covariance of the arms' true official means after `runs` more local runs of `arm`
        (whatever they score: a Gaussian's covariance does not depend on the values), tau held
        at the mixture's moments. `eval_var`: each new run's eval-sampling variance (default:
        one full eval's); a re-eval of an existing checkpoint is not this (its training part is
        already drawn). Kalman update of the state with observation row h = e_B + e_d + e_theta.
        A first baseline run keeps the offset's prior here, where a refit would drop it."""
        v = self.noise.train_var + (self.noise.eval_var if eval_var is None else eval_var)
        h = obs_row(arm, len(self.names))
        p = self.state_cov
        ph = p @ h
        s = float(h @ ph) + v / runs
        post = p - np.outer(ph, ph) / s
        a = official_map(len(self.names))
        return a @ post @ a.T

    def forecasts(self, draws: int = BEST_DRAWS, seed: int = BEST_SEED) -> tuple[ArmForecast, ...]:
        """Each arm's forecast of its official mean: predictive mean, 80% interval,
        P(> the published reference mean) and P(the highest of all arms). With an estimated
        noise (noise.dof) the interval and P(above) are Student t on those dof, the Gaussian's
        sd as scale: sigma^2 scaled-inverse-chi^2 around the estimate, integrated out. A normal
        with the posterior mean of sigma^2 instead is too wide at 80% (85-86% coverage in
        benchmarks/forecast_model.py) and too thin in the tails."""
        from scipy import stats

        mu, cov = self.predictive_mean(), self.predictive_cov()
        sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
        dist = stats.norm() if not self.noise.dof else stats.t(float(self.noise.dof))
        z = float(dist.ppf(0.5 + INTERVAL / 2.0))
        best = p_best(mu, cov, draws, seed)
        out = []
        for i in range(len(self.names)):
            above = None
            if self.reference_mean is not None:
                above = float(dist.cdf((mu[i] - self.reference_mean) / sd[i])) if sd[i] > 0 else float(
                    mu[i] > self.reference_mean)
            out.append(ArmForecast(float(mu[i]), float(mu[i] - z * sd[i]), float(mu[i] + z * sd[i]), above,
                                   float(best[i])))
        return tuple(out)


def official_map(n_arms: int) -> np.ndarray:
    """A with M = A x: M_baseline = B, M_c = B + theta_c (the setup offset d stays local)."""
    a = np.zeros((n_arms, n_arms + 1))
    a[:, 0] = 1.0
    for c in range(1, n_arms):
        a[c, 1 + c] = 1.0
    return a


def obs_row(arm: int, n_arms: int) -> np.ndarray:
    """h with (local mean of arm) = h x: B + d (+ theta_arm for a candidate)."""
    h = np.zeros(n_arms + 1)
    h[0] = h[1] = 1.0
    if arm > 0:
        h[1 + arm] = 1.0
    return h


def p_best(mu: np.ndarray, cov: np.ndarray, draws: int = BEST_DRAWS, seed: int = BEST_SEED) -> np.ndarray:
    """P(arm i's value is the largest) for a joint normal N(mu, cov): exact for two arms
    (Phi of the difference over its sd), a seeded Monte Carlo otherwise (common draws, so the
    same inputs always give the same numbers; SE <= 0.5 / sqrt(draws))."""
    from scipy.special import ndtr

    mu = np.asarray(mu, dtype=np.float64)
    k = mu.size
    if k == 1:
        return np.ones(1)
    if k == 2:
        v = cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1]
        p0 = float(ndtr((mu[0] - mu[1]) / math.sqrt(v))) if v > 0 else float(mu[0] > mu[1]) + 0.5 * (mu[0] == mu[1])
        return np.array([p0, 1.0 - p0])
    w, u = np.linalg.eigh(0.5 * (cov + cov.T))
    # float32 draws: half the time (compare runs in the planner's loop), far below the MC error
    root = (u * np.sqrt(np.clip(w, 0.0, None))).astype(np.float32)
    # arms along rows: the matrix product and the arg-max run over long contiguous rows
    x = root @ _standard_draws(draws, k, seed)
    x += mu.astype(np.float32)[:, None]
    return np.bincount(np.argmax(x, axis=0), minlength=k) / draws


@lru_cache(maxsize=16)
def _standard_draws(draws: int, k: int, seed: int) -> np.ndarray:
    """The common N(0, I) draws of p_best, (k, draws), made once per shape: the planner's loop
    rebuilds compare's report after every chain, and drawing them was half of p_best's time."""
    z = np.random.default_rng(seed).standard_normal((draws, k), dtype=np.float32)
    z = np.ascontiguousarray(z.T)
    z.flags.writeable = False  # shared between calls
    return z


def _arm_obs(arm: ArmRuns, noise: NoiseParts) -> Optional[tuple[float, float]]:
    """(precision-weighted mean, its variance) of one arm's local runs; None without runs."""
    if not arm.scores:
        return None
    y = np.asarray(arm.scores, dtype=np.float64)
    ev = list(arm.eval_vars) + [None] * (len(arm.scores) - len(arm.eval_vars))
    v = np.array([noise.train_var + (noise.eval_var if e is None else float(e)) for e in ev[:y.size]])
    v = np.maximum(v, 1e-9)
    w = 1.0 / v
    return float(np.sum(w * y) / np.sum(w)), float(1.0 / np.sum(w))


@dataclass(frozen=True)
class _Gauss:
    mean: np.ndarray
    cov: np.ndarray
    log_evidence: float


def _theta_precision(n_cand: int, tau: float, mean_sd: float) -> np.ndarray:
    """inverse of tau^2 I + mean_sd^2 J (Sherman-Morrison)."""
    t2, m2 = tau * tau, mean_sd * mean_sd
    return (np.eye(n_cand) - m2 / (t2 + n_cand * m2) * np.ones((n_cand, n_cand))) / t2


def _given_spread(h: np.ndarray, y: np.ndarray, v: np.ndarray, n_arms: int, offset_sd: Optional[float],
                  tau: float, mean_sd: float) -> _Gauss:
    """The exact posterior of x given tau, and log p(y | tau) up to a constant that does not
    depend on tau (the flat priors on B, and on d when offset_sd is None, are the same improper
    factor for every tau)."""
    dim = n_arms + 1
    p0 = np.zeros((dim, dim))
    logdet0 = 0.0
    if offset_sd is not None:
        p0[1, 1] = 1.0 / max(offset_sd, 1e-4) ** 2
        logdet0 = math.log(p0[1, 1])
    if n_arms > 1:
        pt = _theta_precision(n_arms - 1, tau, mean_sd)
        p0[2:, 2:] = pt
        logdet0 += float(np.linalg.slogdet(pt)[1])
    w = 1.0 / v
    lam = p0 + (h.T * w) @ h
    eta = h.T @ (w * y)
    chol = np.linalg.cholesky(lam)
    mean = np.linalg.solve(lam, eta)
    cov = np.linalg.inv(lam)
    logdet_lam = 2.0 * float(np.sum(np.log(np.diag(chol))))
    quad = float(np.sum(w * y * y) - eta @ mean)
    return _Gauss(mean, 0.5 * (cov + cov.T), 0.5 * (logdet0 - logdet_lam - quad))


def spread_grid(prior: FamilyPrior) -> tuple[np.ndarray, np.ndarray]:
    """(tau values, log prior weights): a log grid under a log-normal prior around prior.spread;
    a single point when the prior's log sd is 0 (tau fixed)."""
    if prior.spread_log_sd <= 0:
        return np.array([prior.spread]), np.zeros(1)
    lo, hi, n = SPREAD_GRID
    tau = np.exp(np.linspace(math.log(lo), math.log(hi), n))
    lp = -0.5 * ((np.log(tau) - math.log(prior.spread)) / prior.spread_log_sd) ** 2
    return tau, lp - np.log(np.sum(np.exp(lp - lp.max()))) - lp.max()


def posterior(baseline: ArmRuns, candidates: Sequence[ArmRuns], noise: NoiseParts,
              reference: Optional[PublishedRef], family: FamilyPrior = FamilyPrior()) -> Optional[Posterior]:
    """The joint posterior of the true official means of the baseline and `candidates` (module
    docstring). None when nothing pins the official baseline down: no reference and no local
    runs at all. A candidate without runs gets the family's prediction for a new idea."""
    arms = [baseline, *candidates]
    n_arms = len(arms)
    rows, ys, vs = [], [], []
    for i, arm in enumerate(arms):
        ob = _arm_obs(arm, noise)
        if ob is not None:
            rows.append(obs_row(i, n_arms))
            ys.append(ob[0] - (family.mean if i > 0 else 0.0))  # fit theta - mean, whose prior is centred on 0
            vs.append(ob[1])
    if reference is not None:
        r = np.zeros(n_arms + 1)
        r[0] = 1.0
        rows.append(r)
        ys.append(float(reference.mean))
        vs.append(max(float(reference.sd) ** 2 / int(reference.n), 1e-9))
    if not rows:
        return None
    h, y, v = np.array(rows), np.array(ys), np.array(vs)
    # d flat when the local baseline and the reference both measure it (module docstring)
    offset_sd = None if reference is not None and baseline.scores else (
        reference.offset_sd if reference is not None else 1.0)
    taus, logw = spread_grid(family) if n_arms > 1 else (np.array([family.spread]), np.zeros(1))
    fits = [_given_spread(h, y, v, n_arms, offset_sd, float(t), family.mean_sd) for t in taus]
    lw = logw + np.array([f.log_evidence for f in fits])
    w = np.exp(lw - lw.max())
    w /= w.sum()
    mean = sum(wi * f.mean for wi, f in zip(w, fits))
    cov = sum(wi * (f.cov + np.outer(f.mean - mean, f.mean - mean)) for wi, f in zip(w, fits))
    mean = mean + np.concatenate([[0.0, 0.0], np.full(n_arms - 1, family.mean)])
    a = official_map(n_arms)
    tau_mean = float(np.sum(w * taus))
    return Posterior(
        names=tuple(arm.name for arm in arms),
        mean=a @ mean,
        cov=a @ cov @ a.T,
        state_mean=mean,
        state_cov=cov,
        noise=noise,
        spread=tau_mean,
        spread_sd=float(math.sqrt(max(0.0, float(np.sum(w * taus**2)) - tau_mean**2))),
        reference_mean=None if reference is None else float(reference.mean),
    )
