"""The forecast of the official score: what each arm's mean of 5 official re-trains will be.

The researcher is scored on one number, the mean of OFFICIAL_RUNS official re-trains of what
they submit, against the published reference. This module turns the local runs into a joint
predictive distribution of that number for the baseline and every candidate. Pure functions of
arrays and frozen dataclasses; no store, no I/O. Points throughout, variances in points^2.

The generative model (docs/decision.md):

    B          the official baseline's true mean                 flat prior
    d          the user's setup offset (local - official)        flat with local baseline runs and a
                                                                 reference, else N(0, offset_sd^2)
    theta_c    candidate c's effect: 0 with probability pi (an idea that does nothing), else
               harmful with probability rho, N(k m_h, (k s_h)^2), or helpful, N(k m_p, (k s_p)^2):
               the family's spike and two-sided slab. pi ~ Beta around NULL_SHARE, rho ~ Beta
               around HARMFUL.share, k (the family's scale) log-normal around 1
    R          the published reference mean = B + N(0, ref_sd^2 / ref_n)
    local run r of arm a:  y = B + d + theta_a + N(0, train_var + V_r)   (theta_baseline = 0)
    official run of arm a: B + theta_a + N(0, train_var + eval_var)
    train_var + eval_var   the run variance sigma^2: known, or an estimate s^2 on nu dof (the
                           within-arm scatter and the published sd), sigma^2 = nu s^2 / chi^2_nu

V_r is the run's own eval-sampling variance (binomial, from its per-problem counts), train_var
the training part of the run-to-run noise, eval_var the eval-sampling variance of one full
evaluation (a run without counts gets train_var + eval_var). The official score depends on B
alone, and local baseline runs see B + d: with a prior on d they would lend B part of any setup
offset, so whenever local baseline runs and the published reference can both measure d it gets
no prior, B comes from the reference and the local runs measure the effects. Without a local
baseline run B is still the reference's alone (a cut: the candidates place L = B + d, and through
L they would move the baseline's forecast with the family's guess of how many of them are null).

Why a two-sided spike and slab, why sigma is a dimension of the grid, and why the arms weigh its
nodes at the power SIGMA_BY_ARMS: docs/decision.md, with the figures that chose them; where they
stop holding: the world suite (benchmarks/worlds.py, docs/decision.md's "What it assumes").

Computation: given sigma, the hyperparameters (pi, rho, k) and the local baseline level L = B + d,
the candidates are independent and each one's posterior is a three-part mixture in closed form; B
given L is normal. So the posterior is exact on a grid of nodes: sigma (a log rule under its
estimate's scaled inverse chi^2), hyperparameters (midpoint and log rules under their priors)
times L (an equally spaced grid refined around its posterior: a trapezoid rule).
`Posterior.mixture` keeps the nodes; the forecasts come from it; `Posterior.mean` / `cov` are its
first two moments, the Gaussian the knowledge gradient uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from opsdctl.stats import forecast_read
from opsdctl.stats.forecast_read import BEST_DRAWS, BEST_SEED, INTERVAL, ArmForecast  # noqa: F401 (re-exported)

OFFICIAL_RUNS = 5  # the scorer re-trains 5 times (seed 42) and averages
NULL_SHARE = 0.5  # prior centre of the share of ideas that do nothing (a realistic mix: half null)
NULL_STRENGTH = 6.0  # Beta pseudo-count on that share: a family of ~6 ideas moves it halfway
SIDE_STRENGTH = 6.0  # Beta pseudo-count on the harmful share of the ideas that do something
SCALE_PRIOR_LOG_SD = 0.5  # sd of log(k), the family's scale: 80% of the prior mass in 0.53..1.9
SCALE_GRID = (0.3, 4.0, 7)  # k grid: log-spaced from, to, points
NULL_GRID = 8  # points of the null-share grid (midpoints of equal cells of 0..1)
SIDE_GRID = 5  # points of the harmful-share grid (midpoints of equal cells of 0..1)
LEVEL_NODES = 25  # grid of the local baseline level L = B + d (refined around its posterior)
KEEP_TAIL = 1e-7  # the mixture keeps the nodes that carry all but this much of the mass
SIGMA_NODES = 7  # nodes of the run variance when it is an estimate (noise.dof): a trapezoid rule in log X
SIGMA_TAILS = (1e-3, 1e-5)  # the X ~ chi^2_dof quantiles the nodes span: t's cdf to 8e-4 on 2+ dof
SIGMA_BY_ARMS = 1.0  # the power of the arms' evidence on sigma's nodes: full (docs/decision.md: why not 1/4)
SIGMA_LEVEL_NODES = 15  # L's grid at each of them: its error (1e-5) far below the sigma rule's


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
    dof: the degrees of freedom of the estimate they split (None: known); the forecast integrates
    the run variance over its posterior (`sigma_nodes`)."""

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
class Side:
    """One side of the slab: N(mean, sd^2) (points) at scale 1, holding `share` of the ideas that do
    something."""

    share: float
    mean: float
    sd: float


# the realistic mix's ideas that do something: a third of all ideas U(-5, -1) (the harmful side's
# mean and sd), a sixth U(+1, +4) (its mean; its sd 0.87 widened to 2, so that a winner beyond the
# mix, +4 to +6, is not shrunk into it: chosen on the world suite's tune seed, docs/decision.md)
HARMFUL = Side(2.0 / 3.0, -3.0, 4.0 / math.sqrt(12.0))
HELPFUL = Side(1.0 / 3.0, 2.5, 2.0)


@dataclass(frozen=True)
class FamilyPrior:
    """The family of effects: a share `null_share` of ideas do nothing (effect exactly 0); the rest
    fall on one of `sides` (one or two normals), each side's mean and sd times the family's scale k.
    null_strength: the Beta prior's pseudo-count on the null share (0: fixed); side_strength: the
    same for the first side's share among the ideas that do something (two sides; 0: fixed);
    scale_log_sd: k's log-normal prior around 1 (0: k = 1). One side with null_share=0 and
    null_strength=0 is the plain normal family."""

    null_share: float = NULL_SHARE
    null_strength: float = NULL_STRENGTH
    sides: tuple[Side, ...] = (HARMFUL, HELPFUL)
    side_strength: float = SIDE_STRENGTH
    scale_log_sd: float = SCALE_PRIOR_LOG_SD

    def __post_init__(self):
        if len(self.sides) not in (1, 2):
            raise ValueError("a family has one or two sides")
        # the grid draws the first side's share and gives the second the rest: they must add up
        if abs(sum(s.share for s in self.sides) - 1.0) > 1e-9:
            raise ValueError("the sides' shares of the ideas that do something add up to 1")

    @property
    def spread(self) -> float:
        """The sd of the effects of ideas that do something, at the priors' centres (points)."""
        return _slab_sd(np.array([s.share for s in self.sides])[None, :], self._means(), self._sds())[0]

    def _means(self) -> np.ndarray:
        return np.array([s.mean for s in self.sides])

    def _sds(self) -> np.ndarray:
        return np.array([s.sd for s in self.sides])


def _slab_sd(shares: np.ndarray, means: np.ndarray, sds: np.ndarray) -> np.ndarray:
    """sd of a mixture of normals at scale 1, per row of shares (rows, sides)."""
    m = shares @ means
    return np.sqrt(np.maximum(shares @ (sds**2 + means**2) - m**2, 0.0))


@dataclass(frozen=True)
class Mixture:
    """The posterior as a weighted set of nodes (hyperparameters x local baseline level), each
    exact: B ~ N(b_mean, b_var) and, independently, candidate c's effect is on side k with
    probability slab[:, c, k], there N(slab_mean[:, c, k], slab_var[:, c, k]), else 0; an arm's
    official mean adds N(0, official_var) (its re-trains' own noise at the node's run variance).
    Arrays: (nodes,) and (nodes, C, sides)."""

    weight: np.ndarray
    b_mean: np.ndarray
    b_var: np.ndarray
    slab: np.ndarray
    slab_mean: np.ndarray
    slab_var: np.ndarray
    official_var: np.ndarray


@dataclass(frozen=True)
class Inputs:
    """What `posterior` was given: the same inputs make the same posterior, so a diagnostic can
    build it again under other assumptions (benchmarks/calibration_shapes.py: the true sd known)."""

    baseline: ArmRuns
    candidates: tuple[ArmRuns, ...]
    noise: NoiseParts
    reference: Optional[PublishedRef]
    family: FamilyPrior


@dataclass(frozen=True)
class Posterior:
    """The joint posterior of the arms' true official means (arm 0 is the baseline).

    mean, cov: of M_a = B + theta_a, the arms' true official means (points, points^2): the
    mixture's first two moments, which the knowledge gradient's Gaussian what-ifs use.
    state_mean, state_cov: of x = (B, d, theta_1..theta_C), for what-if updates (`after_runs`).
    mixture: the exact posterior the forecasts (interval, p_above_reference, p_best) come from.
    noise: the per-run components (with an estimated noise, the training part's posterior mean);
    official runs add noise.run_var / OFFICIAL_RUNS to each arm.
    spread, spread_sd: posterior mean and sd of the slab's sd (points); null_share: of the share
    of ideas that do nothing; new_mean, new_sd: a fresh idea's effect under the family.
    inputs: what it was built from (reference_mean, the published mean, is read from it).
    """

    names: tuple[str, ...]
    mean: np.ndarray
    cov: np.ndarray
    state_mean: np.ndarray
    state_cov: np.ndarray
    mixture: Mixture
    noise: NoiseParts
    spread: float
    spread_sd: float
    null_share: float
    new_mean: float
    new_sd: float
    inputs: Inputs = field(repr=False, compare=False)
    official_runs: int = OFFICIAL_RUNS

    @property
    def reference_mean(self) -> Optional[float]:
        """The published mean the forecasts' p_above_reference is read against (None: none given)."""
        ref = self.inputs.reference
        return None if ref is None else float(ref.mean)

    def predictive_mean(self) -> np.ndarray:
        return self.mean

    def predictive_cov(self) -> np.ndarray:
        """Covariance of the arms' official OFFICIAL_RUNS-run means (true mean + their noise)."""
        return self.cov + np.eye(len(self.names)) * (self.noise.run_var / self.official_runs)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def after_runs(self, arm: int, runs: int = 1, eval_var: Optional[float] = None) -> np.ndarray:
        """The covariance of the arms' true official means after `runs` more local runs of `arm`
        (whatever they score), under the posterior's Gaussian summary (state_mean, state_cov).
        `eval_var`: each new run's eval-sampling variance (default: one full eval's); a re-eval of
        an existing checkpoint is not this (its training part is already drawn). Kalman update
        of the state with observation row h = e_B + e_d + e_theta. A first baseline run keeps
        the offset's prior here, where a refit would drop it."""
        v = self.noise.train_var + (self.noise.eval_var if eval_var is None else eval_var)
        h = obs_row(arm, len(self.names))
        p = self.state_cov
        ph = p @ h
        s = float(h @ ph) + v / runs
        post = p - np.outer(ph, ph) / s
        a = official_map(len(self.names))
        return a @ post @ a.T

    def forecasts(self, draws: int = BEST_DRAWS, seed: int = BEST_SEED) -> tuple[ArmForecast, ...]:
        """Each arm's forecast of its official mean (opsdctl.stats.forecast_read.forecasts)."""
        return forecast_read.forecasts(self.mixture, self.reference_mean, draws, seed)

    def p_effect_positive(self) -> np.ndarray:
        """Each candidate's P(theta_c > 0) (opsdctl.stats.forecast_read.p_effect_positive)."""
        return forecast_read.p_effect_positive(self.mixture)


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
class _Hyper:
    """The hyperparameter nodes: null share pi, each side's share (nodes, sides), the scale k, and
    each node's log prior weight (max 0)."""

    pi: np.ndarray
    shares: np.ndarray
    scale: np.ndarray
    lp: np.ndarray

    def first(self) -> "_Hyper":
        return _Hyper(self.pi[:1], self.shares[:1], self.scale[:1], self.lp[:1])


def _hyper_grid(prior: FamilyPrior) -> _Hyper:
    """Every hyperparameter node: the null share and the first side's share on midpoints of equal
    cells under their Beta priors, the scale on a log grid under its log-normal prior; a fixed one is
    a single point."""
    from opsdctl.stats.distributions import beta_logpdf

    def beta_cells(centre: float, strength: float, cells: int) -> tuple[np.ndarray, np.ndarray]:
        if strength <= 0:
            return np.array([centre]), np.zeros(1)
        x = (np.arange(cells) + 0.5) / cells
        return x, beta_logpdf(x, max(centre * strength, 1e-3), max((1.0 - centre) * strength, 1e-3))

    pi, lp_pi = beta_cells(prior.null_share, prior.null_strength, NULL_GRID)
    if len(prior.sides) == 2:
        rho, lp_rho = beta_cells(prior.sides[0].share, prior.side_strength, SIDE_GRID)
    else:
        rho, lp_rho = np.ones(1), np.zeros(1)
    if prior.scale_log_sd > 0:
        lo, hi, n = SCALE_GRID
        k = np.exp(np.linspace(math.log(lo), math.log(hi), n))
        lp_k = -0.5 * (np.log(k) / prior.scale_log_sd) ** 2
    else:
        k, lp_k = np.ones(1), np.zeros(1)
    g = np.meshgrid(np.arange(pi.size), np.arange(rho.size), np.arange(k.size), indexing="ij")
    i, j, m = (x.ravel() for x in g)
    lp = lp_pi[i] + lp_rho[j] + lp_k[m]
    shares = np.column_stack([rho[j], 1.0 - rho[j]]) if len(prior.sides) == 2 else rho[j][:, None]
    return _Hyper(pi[i], shares, k[m], lp - lp.max())


def _log_norm(x: np.ndarray, var: np.ndarray) -> np.ndarray:
    return -0.5 * (np.log(2.0 * math.pi * var) + x * x / var)


def _nodes(level: np.ndarray, y0: Optional[tuple[float, float]], level_prior: Optional[tuple[float, float]],
           obs: list[Optional[tuple[float, float]]], hyper: _Hyper, family: FamilyPrior) -> tuple[np.ndarray, dict]:
    """Log posterior weight of every (hyper node, level) pair, and the per-candidate side
    responsibilities and side posteriors there, (hyper, level, sides). `level`: the L grid
    (equally spaced, so the weights are a trapezoid rule); y0: the baseline's (local mean,
    variance); level_prior: L's normal prior (None: flat); obs: each candidate's (local mean,
    variance) or None."""
    pi, lp = hyper.pi[:, None], hyper.lp[:, None]
    lw = lp + np.zeros((1, level.size))
    if y0 is not None:
        lw = lw + _log_norm(y0[0] - level, np.array(y0[1]))[None, :]
    if level_prior is not None:
        lw = lw + _log_norm(level - level_prior[0], np.array(level_prior[1]))[None, :]
    # (hyper, 1, sides): each side's prior share of all ideas, mean and variance at the node's scale.
    # A side's likelihood and update depend on the scale alone: computed once per scale (the shares'
    # nodes repeat every scale 40 times) and indexed out to the hyper nodes
    share = ((1.0 - hyper.pi)[:, None] * hyper.shares)[:, None, :]
    scales, at = np.unique(hyper.scale, return_inverse=True)
    at = at.ravel()
    mu_k = (scales[:, None] * family._means()[None, :])[:, None, :]
    t2_k = ((scales[:, None] * family._sds()[None, :]) ** 2)[:, None, :]
    mu, t2 = mu_k[at], t2_k[at]
    shape = lw.shape + (share.shape[2],)
    slab, smean, svar = [], [], []
    with np.errstate(divide="ignore"):
        l_null, l_side = np.log(pi), np.log(share)
    for ob in obs:
        if ob is None:  # no runs: the family's prior
            slab.append(np.broadcast_to(share, shape))
            smean.append(np.broadcast_to(mu, shape))
            svar.append(np.broadcast_to(t2, shape))
            continue
        y, r = ob
        e = y - level[None, :]
        a = l_null + _log_norm(e, np.array(r))
        b = l_side + _log_norm(e[:, :, None] - mu_k, t2_k + r)[at]
        tot = np.logaddexp(a, np.logaddexp.reduce(b, axis=2))
        lw = lw + tot
        slab.append(np.exp(b - tot[:, :, None]))
        k = t2_k / (t2_k + r)
        smean.append((mu_k + k * (e[:, :, None] - mu_k))[at])
        svar.append(np.broadcast_to((k * r)[at], shape))
    return lw, {"slab": slab, "mean": smean, "var": svar}


@dataclass(frozen=True)
class SigmaNode:
    """One node of the run variance: the noise there, its run variance over the estimate's
    (`ratio`), and its log weight under the estimate's own posterior."""

    noise: NoiseParts
    ratio: float
    log_weight: float


def sigma_nodes(noise: NoiseParts) -> tuple[SigmaNode, ...]:
    """The run variance's nodes. Known (no dof): the noise itself. Estimated, s^2 on nu dof:
    sigma^2 = nu s^2 / X, X ~ chi^2_nu (the scaled inverse chi^2 that a Student t integrates),
    SIGMA_NODES equally spaced in log X between its SIGMA_TAILS quantiles, trapezoid weights; each
    node scales the training part, the eval-sampling part being known from the counts (so no node
    falls below it). Log X and
    not a Gauss-Laguerre rule in X: sigma^2's upper tail on a few dof is heavy, and a Laguerre rule
    of 5 nodes put the 99% point of t on 2 dof 42% short."""
    if not noise.dof:
        return (SigmaNode(noise, 1.0, 0.0),)
    from opsdctl.stats.distributions import chi2_ppf

    nu, s2 = float(noise.dof), noise.run_var
    lo, hi = (math.log(chi2_ppf(q, nu)) for q in (SIGMA_TAILS[0], 1.0 - SIGMA_TAILS[1]))
    t = np.linspace(lo, hi, SIGMA_NODES)
    lw = 0.5 * nu * t - 0.5 * np.exp(t)  # log density of log X, up to a constant
    lw -= np.logaddexp.reduce(lw)
    # a node below the eval-sampling part sits on it (the training part is not negative), and its
    # ratio is then its run variance's, so the local runs, the official ones and the published
    # mean all see one sigma^2 at every node
    run = np.maximum(nu / np.exp(t) * s2, noise.eval_var)
    ratio = run / s2 if s2 > 0.0 else nu / np.exp(t)
    return tuple(SigmaNode(NoiseParts(float(v) - noise.eval_var, noise.eval_var, None), float(r), float(x))
                 for v, r, x in zip(run, ratio, lw))


def _moved(noise: NoiseParts, nodes: Sequence[SigmaNode], posterior: np.ndarray) -> NoiseParts:
    """The estimate as the arms moved it: its run variance times the nodes' prior mean of 1 / ratio
    over their posterior mean (1 without candidates: s^2 is 1 / E[1 / sigma^2] under its own
    posterior); the what-ifs (after_runs) and the Gaussian summary use it. Not sigma^2's posterior
    mean: on a few dof that is mostly its heavy tail, and any evidence that trims it reads as less
    noise. `posterior`: the nodes' posterior weights."""
    inverse = np.array([1.0 / n.ratio for n in nodes])
    factor = float(np.exp([n.log_weight for n in nodes]) @ inverse / (posterior @ inverse))
    if factor == 1.0:
        return noise
    return NoiseParts(max(0.0, factor * noise.run_var - noise.eval_var), noise.eval_var, noise.dof)


@dataclass(frozen=True)
class _Setup:
    """What the level grid's weights need at one noise: the baseline's and the candidates' (local
    mean, variance), L's prior (None: flat) and B given L as (mean, variance)."""

    y0: Optional[tuple[float, float]]
    obs: list[Optional[tuple[float, float]]]
    level_prior: Optional[tuple[float, float]]
    b_of: Callable[[np.ndarray], tuple]


def _setup(baseline: ArmRuns, candidates: Sequence[ArmRuns], noise: NoiseParts,
           reference: Optional[PublishedRef], ratio: float) -> _Setup:
    """B given L = B + d, and L's prior (module docstring), at `noise`; the published mean's own
    sampling noise scales with the run variance (`ratio`: the node's over the estimate's)."""
    y0 = _arm_obs(baseline, noise)
    obs = [_arm_obs(c, noise) for c in candidates]
    od = 1.0 if reference is None else max(float(reference.offset_sd), 0.0)
    if reference is None:
        return _Setup(y0, obs, None, lambda lv: (lv, od * od))
    rv = max(float(reference.sd) ** 2 * ratio / int(reference.n), 1e-12)
    r_mean = float(reference.mean)
    if y0 is not None:  # d flat: B is the reference's alone
        return _Setup(y0, obs, None, lambda lv: (np.full_like(lv, r_mean), rv))
    # no local baseline run: B is still the reference's alone. Read through the level L, B would
    # follow the candidates' scores (the family's nulls place L), and a session of mostly harmful
    # or mostly helpful ideas would move the baseline's forecast with them
    return _Setup(y0, obs, (r_mean, rv + od * od), lambda lv: (np.full_like(lv, r_mean), rv))


def posterior(baseline: ArmRuns, candidates: Sequence[ArmRuns], noise: NoiseParts,
              reference: Optional[PublishedRef], family: FamilyPrior = FamilyPrior(),
              sigma_by_arms: float = SIGMA_BY_ARMS) -> Optional[Posterior]:
    """The joint posterior of the true official means of the baseline and `candidates` (module
    docstring). None when nothing pins the official baseline down: no reference and no local
    runs at all. A candidate without runs gets the family's prediction for a new idea. An
    estimated noise (noise.dof) is one more dimension of the grid (`sigma_nodes`): each node's
    prior weight is the estimate's own posterior (the within-arm scatter and the published sd),
    and the arms' means weigh it again, the family telling how far apart they should fall.
    sigma_by_arms (eta, 0..1) tempers that: a node's mass is its estimate's weight times the arms'
    evidence for it to the power eta; 0 cuts the feedback (the arms weigh only what is inside a
    node), 1 is the full posterior (benchmarks/calibration_shapes.py measures them beside the
    default, SIGMA_BY_ARMS)."""
    if reference is None and not baseline.scores and all(not c.scores for c in candidates):
        return None
    n_cand = len(candidates)
    hyper = _hyper_grid(family)
    # without candidates the family is only a fresh idea's prior: L's integral needs one node of it
    fit_hyper = hyper if n_cand else hyper.first()
    # L's grid: wide first at the estimate, then each noise node's own around that posterior
    est = _setup(baseline, candidates, noise, reference, 1.0)
    wide = 2 * LEVEL_NODES  # L's posterior is inside +-10 sd of what anchors it
    if est.y0 is not None:
        centre, half = est.y0[0], 10.0 * math.sqrt(est.y0[1])
    elif est.level_prior is not None:
        centre, half = est.level_prior[0], 10.0 * math.sqrt(est.level_prior[1])
    else:  # only the candidates place L: a far wider grid
        wide = 4 * LEVEL_NODES
        seen = [o for o in est.obs if o is not None]
        centre = float(np.median([o[0] for o in seen]))
        half = 10.0 * (math.sqrt(max(o[1] for o in seen)) + family.spread + float(np.max(np.abs(family._means())))) \
            + float(np.ptp([o[0] for o in seen]))
    level = np.linspace(centre - half, centre + half, wide)
    lw, _ = _nodes(level, est.y0, est.level_prior, est.obs, fit_hyper, family)
    wl = np.exp(lw - lw.max()).sum(axis=0)
    wl /= wl.sum()
    centre = float(wl @ level)
    half = 9.0 * math.sqrt(max(float(wl @ (level - centre) ** 2), 1e-12)) + 1e-9
    sides = len(family.sides)
    parts = []
    nodes = sigma_nodes(noise)
    for node in nodes:
        # a known noise's one node is the estimate itself: its setup is `est`
        st = est if node.noise is noise and node.ratio == 1.0 else \
            _setup(baseline, candidates, node.noise, reference, node.ratio)
        # L's posterior sd grows with sigma where the runs pin L, not where the offset's prior does
        h = half * math.sqrt(max(node.ratio, 0.25))
        level = np.linspace(centre - h, centre + h, LEVEL_NODES if len(nodes) == 1 else SIGMA_LEVEL_NODES)
        lw, per = _nodes(level, st.y0, st.level_prior, st.obs, fit_hyper, family)
        lw = lw + node.log_weight + math.log(level[1] - level[0])  # the trapezoid's step: nodes compare
        parts.append((node, level, st, lw, per))
    if sigma_by_arms != 1.0:  # each node's evidence from the arms, log Z, raised to eta: times Z^(eta - 1)
        log_z = np.array([float(np.logaddexp.reduce(p[3].ravel())) - p[0].log_weight for p in parts])
        shift = (sigma_by_arms - 1.0) * log_z
        shift -= shift.max()
        parts = [(nd, lv, st, lw + d, per) for (nd, lv, st, lw, per), d in zip(parts, shift)]
    top = max(float(p[3].max()) for p in parts)
    cols = {k: [] for k in ("w", "bm", "bv", "lv", "slab", "smean", "svar", "ov")}
    wh = np.zeros(fit_hyper.pi.size)
    mass = []  # each noise node's posterior mass
    for node, level, st, lw, per in parts:
        w = np.exp(lw - top)
        wh += w.sum(axis=1)
        mass.append(w.sum())
        shape = w.shape
        flat = lambda a: np.broadcast_to(a, shape).ravel()  # noqa: E731
        by_side = lambda a: np.broadcast_to(a, shape + (sides,)).reshape(-1, sides)  # noqa: E731
        bm, bv = st.b_of(level)
        cols["w"].append(w.ravel())
        cols["bm"].append(flat(bm[None, :]))
        cols["bv"].append(flat(np.asarray(bv, dtype=np.float64)))
        cols["lv"].append(flat(level[None, :]))
        cols["ov"].append(np.full(w.size, node.noise.run_var / OFFICIAL_RUNS))
        for key, src in (("slab", "slab"), ("smean", "mean"), ("svar", "var")):
            cols[key].append(np.stack([by_side(x) for x in per[src]], axis=1) if n_cand
                             else np.zeros((w.size, 0, sides)))
    w, bm, bv, lv, ov = (np.concatenate(cols[k]) for k in ("w", "bm", "bv", "lv", "ov"))
    slab, smean, svar = (np.concatenate(cols[k]) for k in ("slab", "smean", "svar"))
    w = w / w.sum()
    # the nodes that carry all but KEEP_TAIL of the mass
    order = np.argsort(w)[::-1]
    keep = order[: int(np.searchsorted(np.cumsum(w[order]), 1.0 - KEEP_TAIL)) + 1]
    w, bm, bv, lv, slab, smean, svar, ov = (x[keep] for x in (w, bm, bv, lv, slab, smean, svar, ov))
    w = w / w.sum()
    mix = Mixture(w, bm, bv, slab, smean, svar, ov)
    # the mixture's first two moments of x = (B, d, theta_1..theta_C)
    theta = np.sum(slab * smean, axis=2)
    e = np.column_stack([bm, lv - bm, theta])
    mean = w @ e
    dev = e - mean
    cov = (dev.T * w) @ dev
    vb = float(w @ bv)
    cov[0, 0] += vb
    cov[1, 1] += vb
    cov[0, 1] -= vb
    cov[1, 0] -= vb
    th2 = np.sum(slab * (svar + smean**2), axis=2) - theta**2
    cov[2:, 2:] += np.diag(w @ th2) if n_cand else 0.0
    # the hyperparameters' posterior: a fresh idea, the spread, the null share
    wh = wh if n_cand else np.exp(hyper.lp)
    wh /= wh.sum()
    pi, k = hyper.pi, hyper.scale
    m0, s0 = family._means(), family._sds()
    new_mean = float(wh @ ((1 - pi) * k * (hyper.shares @ m0)))
    new_sd = math.sqrt(max(0.0, float(wh @ ((1 - pi) * k**2 * (hyper.shares @ (s0**2 + m0**2)))) - new_mean**2))
    spread = k * _slab_sd(hyper.shares, m0, s0)
    tau_mean = float(wh @ spread)
    a = official_map(n_cand + 1)
    return Posterior(
        names=(baseline.name, *(c.name for c in candidates)),
        mean=a @ mean,
        cov=a @ cov @ a.T,
        state_mean=mean,
        state_cov=cov,
        mixture=mix,
        noise=_moved(noise, nodes, np.array(mass) / sum(mass)),
        spread=tau_mean,
        spread_sd=math.sqrt(max(0.0, float(wh @ spread**2) - tau_mean**2)),
        null_share=float(wh @ pi),
        new_mean=new_mean,
        new_sd=new_sd,
        inputs=Inputs(baseline, tuple(candidates), noise, reference, family),
    )
