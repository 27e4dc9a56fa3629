"""Statistics for ranking recipe variants against run-to-run noise.

Pure functions of plain numbers and arrays; no store, no I/O. Scores are in points (0-100),
variances in points^2.

The model: run r of variant g scores y_gr = mu_g + e_gr with one run-to-run sigma shared by
every variant (1-5 runs per variant is far too few for a sigma each; Welch's t is useless
there). sigma^2 is estimated by pooling the within-variant scatter (within_ss) with an
informative prior (s0, nu0) taken from the published baseline, weighted by how well the local
scatter agrees with it (prior_check, pooled_with_weight), and every test uses Student's t with
the pooled degrees of freedom nu. The baseline mean combines local runs with the published mean
(baseline_mean, baseline_var); a candidate is read against it by compare_means, and its verdict
(rule_verdict) is one-sided at the level of its look (look_level: Bonferroni over the family,
alpha spent over the looks). These are the functions opsdctl.stats.compare.build_report calls:
the tested rule is the live one. The rule's arithmetic (within_ss, pooled_with_weight,
baseline_mean/var, reference_se, se_delta, verdict_code) takes floats or arrays over simulated
studies, so opsdctl.sim.operating's error-rate simulation runs these same functions. The t and F
distributions come from opsdctl.stats.special (scipy.special's functions without its 0.2 s import:
the CLI must start fast).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

ALPHA = 0.05  # family-wise error rate of the verdicts (one-sided, Bonferroni over m)
CI_LEVEL = 0.95  # two-sided confidence level of delta's interval
FUTILITY_LOOKS = 3  # partial looks at k = 4, 8, 12 of 12 (planner's futility rule)
PRIOR_FULL_AT = 0.5  # the published sd keeps its full weight while the mismatch test's p >= this (weight p / this below)
MIN_LOCAL_DOF = 4  # no verdict before the local runs have this many dof to check the prior with
OFFSET_TEST_LEVEL = 0.05  # the reference check's level: reported only, it never switches the published mean off
DEFAULT_OFFSET_SD = 1.0  # points: how far the user's setup may sit from the published one (1 sd)
MAX_RULE_RUNS = 100  # runs needed under the verdict rule: searched up to this many

NOT_ENOUGH_RUNS = "not enough runs to estimate noise"

BETTER, WORSE, UNDECIDED = "better", "worse", "undecided"


def _plain(x):
    """A float for a scalar; an array (many simulated studies at once) stays an array."""
    return float(x) if np.ndim(x) == 0 else x


# ---------------------------------------------------------------- one run from its counts


def run_score(counts: Sequence[int], k: int) -> float:
    """Score of one run in points: y = (100/n) * sum_i c_i / k (avg@k)."""
    c = np.asarray(counts, dtype=np.float64)
    if c.size == 0:
        raise ValueError("run_score: no problems")
    if k < 1 or np.any(c < 0) or np.any(c > k):
        raise ValueError(f"run_score: counts must lie in [0, k={k}]")
    return float(100.0 * c.sum() / (c.size * k))


def eval_variance(counts: Sequence[int], k: int) -> float:
    """Eval-sampling variance of one run's score (points^2), unbiased:

        V = (100^2 / n^2) * sum_i c_i (k - c_i) / (k^2 (k - 1)).

    Each problem's fraction c_i/k has variance p_i(1-p_i)/k; c_i(k-c_i)/(k(k-1)) is the
    unbiased estimate of p_i(1-p_i), hence the k - 1. Needs k >= 2.
    """
    c = np.asarray(counts, dtype=np.float64)
    n = c.size
    if n == 0:
        raise ValueError("eval_variance: no problems")
    if k < 2:
        raise ValueError("eval_variance: needs k >= 2 samples per problem")
    if np.any(c < 0) or np.any(c > k):
        raise ValueError(f"eval_variance: counts must lie in [0, k={k}]")
    return float(1e4 / n**2 * np.sum(c * (k - c)) / (k**2 * (k - 1)))


# ---------------------------------------------------------------- pooled run-to-run noise


def prior_from_reference(sd: float | None, n: int | None, use: bool = True) -> tuple[float | None, int]:
    """Prior (s0, nu0) from the published baseline: s0 = sd, nu0 = n - 1; (None, 0) when off."""
    if not use or sd is None or n is None or n < 2:
        return None, 0
    return float(sd), int(n) - 1


# ---------------------------------------------------------------- Student's t


def t_cdf(x: float, nu: float) -> float:
    """F_t,nu(x), the CDF of Student's t with nu > 0 degrees of freedom."""
    from opsdctl.stats.special import stdtr

    if nu <= 0:
        raise ValueError("t_cdf: needs nu > 0")
    return float(stdtr(nu, x))


def t_ppf(q: float, nu: float) -> float:
    """Quantile of Student's t with nu > 0 degrees of freedom: F_t,nu^-1(q)."""
    from opsdctl.stats.special import stdtrit

    if nu <= 0:
        raise ValueError("t_ppf: needs nu > 0")
    return float(stdtrit(nu, q))


@dataclass(frozen=True)
class Delta:
    """A candidate against the baseline. Everything but delta is None when nu == 0."""

    delta: float
    se: float | None
    ci_low: float | None
    ci_high: float | None
    p_beat: float | None


def se_delta(s2, n_v: int, var_b):
    """SE of delta = ybar_v - mean_b: sqrt(s^2 / n_v + var_b). s2 and var_b may be arrays over
    studies (sim.operating); a float stays a float."""
    with np.errstate(invalid="ignore"):
        return _plain(np.sqrt(s2 / n_v + var_b))


def compare_means(
    mean_v: float, n_v: int, mean_b: float, var_b: float | None, s2: float | None, nu: float, level: float = CI_LEVEL
) -> Delta:
    """A candidate's n_v runs (mean mean_v) against the baseline mean mean_b of variance var_b
    (baseline_var: local runs, the published mean, or both), on the pooled s^2 with nu dof:

        delta = ybar_v - mean_b,  SE = sqrt(s^2 / n_v + var_b),
        CI = delta -/+ t_{(1+level)/2, nu} SE,  P(beat) = F_t,nu(delta / SE).

    With SE = 0 (identical runs, no prior) P(beat) is 1, 0 or 1/2 by the sign of delta. Without a
    noise estimate (s^2 or var_b None, nu = 0) only delta is known.
    """
    delta = float(mean_v - mean_b)
    if s2 is None or var_b is None or nu <= 0:
        return Delta(delta, None, None, None, None)
    se = se_delta(s2, n_v, var_b)
    half = t_ppf(0.5 + level / 2.0, nu) * se
    if se == 0.0:
        p = 1.0 if delta > 0 else 0.0 if delta < 0 else 0.5
    else:
        p = t_cdf(delta / se, nu)
    return Delta(delta, se, delta - half, delta + half, p)


def mean_interval(mean: float, n: int, s: float | None, nu: int, level: float = CI_LEVEL):
    """(se, low, high) of one variant's mean: se = s / sqrt(n), mean -/+ t_{(1+level)/2, nu} se."""
    if s is None or nu <= 0 or n < 1:
        return None, None, None
    se = float(s) / math.sqrt(n)
    half = t_ppf(0.5 + level / 2.0, nu) * se
    return se, mean - half, mean + half


# ---------------------------------------------------------------- the prior must earn its place


@dataclass(frozen=True)
class PriorCheck:
    """The published sd against the local within-variant scatter, and the weight it keeps.

    F = (SS_local / nu_local) / s0^2 has an F(nu_local, nu0) law if the local run-to-run sigma is
    the published one (s0 itself is an estimate from nu0 dof); p = P(F(nu_local, nu0) >= F),
    one-sided (a local scatter below s0 makes the prior conservative, so only "larger" counts).
    weight = min(1, p / PRIOR_FULL_AT) (a power prior whose power falls with the evidence): the share of the prior's nu0 dof that is pooled. It falls
    smoothly with the evidence of mismatch, so no single look drops the prior (a test at every
    look fires often over a session) and the pooled s and every figure built on it move
    continuously. kept: some weight remains (weight > 0).
    chi2 = SS_local / s0^2 (the statistic; p is from F = chi2 / nu_local).
    """

    s_local: float | None
    nu_local: int
    s0: float | None
    nu0: int
    chi2: float | None
    p: float | None
    weight: float

    @property
    def kept(self) -> bool:
        return self.weight > 0.0


def prior_weight(ss_local, nu_local: int, s0: float | None, nu0: int) -> np.ndarray:
    """PriorCheck.weight over an array of local sums of squares (same nu_local): min(1, p / PRIOR_FULL_AT)
    with p = P(F(nu_local, nu0) >= SS / (nu_local s0^2)); 1 with nothing to check, 0 without a prior."""
    from opsdctl.stats.special import fdtrc

    ss = np.asarray(ss_local, dtype=np.float64)
    if s0 is None or nu0 <= 0:
        return np.zeros_like(ss)
    if nu_local <= 0 or s0 <= 0.0:
        return np.ones_like(ss)
    p = fdtrc(nu_local, nu0, ss / nu_local / float(s0) ** 2)
    return np.clip(p / PRIOR_FULL_AT, 0.0, 1.0)


def prior_check(ss_local: float, nu_local: int, s0: float | None, nu0: int) -> PriorCheck:
    """Check the prior (s0, nu0) against the local scatter (sum of squares SS over nu_local dof)."""
    from opsdctl.stats.special import fdtrc

    s_local = math.sqrt(ss_local / nu_local) if nu_local > 0 else None
    w = float(prior_weight(ss_local, nu_local, s0, nu0))
    if s0 is None or nu0 <= 0:
        return PriorCheck(s_local, nu_local, None, 0, None, None, 0.0)
    if nu_local <= 0 or s0 <= 0.0:
        return PriorCheck(s_local, nu_local, float(s0), nu0, None, None, w)
    chi2 = float(ss_local) / float(s0) ** 2
    return PriorCheck(s_local, nu_local, float(s0), nu0, chi2, float(fdtrc(nu_local, nu0, chi2 / nu_local)), w)


def full_weight_scatter(nu_local: int, s0: float, nu0: int) -> float:
    """The local scatter s on nu_local dof up to which the prior (s0, nu0) keeps its full weight:
    the s at which prior_check's p equals PRIOR_FULL_AT, s0 * sqrt(F^-1(1 - PRIOR_FULL_AT)) of
    F(nu_local, nu0). At PRIOR_FULL_AT = 0.5 it is the median scatter s0 predicts, which is below s0
    on few dof: a local s a little under the published sd already costs the prior some weight."""
    from opsdctl.stats.special import fdtri

    return float(s0) * math.sqrt(float(fdtri(nu_local, nu0, 1.0 - PRIOR_FULL_AT)))


def pooled_with_weight(ss_local, nu_local: int, s0: float | None, nu0: int, weight):
    """(s^2, nu) pooling the local scatter with weight * nu0 dof of the prior:
    s^2 = (w nu0 s0^2 + SS) / (w nu0 + nu_local); (None, 0) when nu == 0.

    ss_local and weight may be arrays over studies (sim.operating): then both come back as
    arrays, s^2 NaN where nu == 0; floats stay floats."""
    ss, w = np.broadcast_arrays(np.asarray(ss_local, dtype=np.float64), np.asarray(weight, dtype=np.float64))
    prior = w * nu0 if s0 is not None and nu0 > 0 else np.zeros_like(ss)
    nu = prior + nu_local
    with np.errstate(divide="ignore", invalid="ignore"):
        s2 = np.where(nu > 0, (prior * float(s0 or 0.0) ** 2 + ss) / nu, np.nan)
    if np.ndim(s2) == 0:
        return (None, 0) if nu <= 0 else (float(s2), float(nu))
    return s2, nu


def within_ss(groups: Sequence) -> tuple:
    """(sum over groups of sum_r (y_gr - ybar_g)^2, sum_g (n_g - 1)): the local scatter.

    A group is its runs' scores; or (studies x runs) arrays of many simulated studies that share
    their run counts (sim.operating), and then SS is an array over studies."""
    ss, nu = 0.0, 0
    for g in groups:
        y = np.asarray(g, dtype=np.float64)
        if y.shape[-1] >= 2:
            ss = ss + np.sum((y - y.mean(axis=-1, keepdims=True)) ** 2, axis=-1)
            nu += y.shape[-1] - 1
    return _plain(ss), nu


# ---------------------------------------------------------------- the published mean is not the user's setup


def baseline_var(s2, n_local: int, ref_n: int | None, offset_sd, use_ref: bool):
    """Variance (points^2) of the baseline mean the verdict uses.

    The published mean is one more measurement of the local baseline, with its own sampling
    variance s^2 / n_ref and a setup offset of sd offset_sd:  v_ref = s^2 / n_ref + offset_sd^2.
      no local runs:              v_ref
      local runs, reference used: 1 / (n_local / s^2 + 1 / v_ref)   (precision-weighted)
      local runs only:            s^2 / n_local
    None when there is neither. s2 and offset_sd may be arrays over studies (sim.operating).
    """
    v_ref = None if not use_ref or not ref_n else s2 / ref_n + offset_sd**2
    if n_local <= 0:
        return v_ref
    if v_ref is None:
        return s2 / n_local
    if np.ndim(s2) == 0 and s2 == 0.0:
        return 0.0
    with np.errstate(divide="ignore"):
        return 1.0 / (n_local / s2 + 1.0 / v_ref)


def baseline_mean(local_mean, n_local: int, s2, ref_mean: float | None,
                  ref_n: int | None, offset_sd, use_ref: bool):
    """The baseline mean with the same weights as baseline_var (arrays over studies too)."""
    v_ref = None if not use_ref or ref_mean is None or not ref_n else s2 / ref_n + offset_sd**2
    if n_local <= 0 or local_mean is None:
        return None if v_ref is None else float(ref_mean)
    if v_ref is None:
        return _plain(local_mean)
    if np.ndim(s2) == 0 and s2 == 0.0:
        return float(local_mean)
    with np.errstate(divide="ignore", invalid="ignore"):
        w_l, w_r = n_local / s2, 1.0 / v_ref
        return _plain((w_l * local_mean + w_r * ref_mean) / (w_l + w_r))


def offset_sd_seen(diff, se2, offset_sd: float):
    """The setup offset's sd given what the local baseline shows: the configured offset_sd^2 plus
    the part of the observed squared difference that sampling does not explain, with
    diff = ybar_local - mean_ref and se2 = its sampling variance s^2 (1/n_local + 1/n_ref):

        sqrt(offset_sd^2 + max(0, diff^2 - se2)).

    (diff^2 - se2 is the moment estimate of an offset's squared size.) It grows smoothly with the
    difference, so the published mean fades from the baseline as the evidence of an offset mounts
    instead of staying fully combined until a test rejects it: a +2-point offset with the local
    baseline alternating and a look after every run gave 5.2% false `better` with the test, 4.3%
    with this (benchmarks/results/stats_goals.md)."""
    return np.sqrt(float(offset_sd) ** 2 + np.maximum(0.0, np.asarray(diff, dtype=np.float64) ** 2 - se2))


@dataclass(frozen=True)
class ReferenceCheck:
    """Local baseline runs against the published mean: diff = ybar_local - mean_ref,
    SE = s sqrt(1/n_local + 1/n_ref) (no offset term: this tests whether there is an offset),
    a two-sided t test on nu dof, reported; what the baseline uses is offset_sd_seen."""

    diff: float
    se: float
    ci_low: float
    ci_high: float
    p: float
    significant: bool


def reference_se(s, n_local: int, ref_n: int):
    """SE of ybar_local - mean_ref: s sqrt(1/n_local + 1/n_ref) (s may be an array over studies)."""
    return _plain(s * np.sqrt(1.0 / n_local + 1.0 / ref_n))


def reference_check(local_mean: float, n_local: int, ref_mean: float, ref_n: int, s: float, nu: int,
                    level: float = OFFSET_TEST_LEVEL, ci: float = CI_LEVEL) -> ReferenceCheck | None:
    if n_local <= 0 or nu <= 0 or not ref_n:
        return None
    diff = float(local_mean - ref_mean)
    se = reference_se(float(s), n_local, ref_n)
    half = t_ppf(0.5 + ci / 2.0, nu) * se
    if se == 0.0:
        p = 1.0 if diff == 0.0 else 0.0
    else:
        p = 2.0 * t_cdf(-abs(diff) / se, nu)
    return ReferenceCheck(diff, se, diff - half, diff + half, p, p < level)


# ---------------------------------------------------------------- the verdict rule


def look_level(j: int, m: int, local_dof: int, alpha: float = ALPHA) -> float:
    """One-sided nominal level of a verdict at look j (local runs in the comparison), Bonferroni
    over the m candidates of the family and alpha spent over the looks (opsdctl.stats.sequential);
    0 (no verdict) before the local runs have MIN_LOCAL_DOF dof."""
    from opsdctl.stats.sequential import nominal_level

    if m < 1 or local_dof < MIN_LOCAL_DOF:
        return 0.0
    return nominal_level(j, alpha / m)


def upper_t(level: float, nu):
    """t_{1 - level, nu}, computed from the lower tail so that tiny levels stay exact (nu > 0; an
    array of them gives an array)."""
    from opsdctl.stats.special import stdtrit

    return _plain(-stdtrit(nu, level))


CODE_BETTER, CODE_WORSE, CODE_UNDECIDED = 1, -1, 0
_VERDICT_OF_CODE = {CODE_BETTER: BETTER, CODE_WORSE: WORSE, CODE_UNDECIDED: UNDECIDED}


def verdict_code(delta, se, nu, level: float):
    """The verdict rule as a code: 1 (better) if delta / SE >= t_{1-level, nu}, i.e. P(beat) >= 1 -
    level; -1 (worse) if <= -t; else 0 (undecided, also without a test: nu <= 0 or level 0).
    SE = 0 reads as delta's sign. delta, se, nu and level may be arrays over studies
    (sim.operating; nu is fractional there: the prior's weighted dof) or over run counts
    (Arms.settles_after); an int for floats."""
    from opsdctl.stats.special import stdtr

    delta, se, nu, level = (np.asarray(x, dtype=np.float64) for x in (delta, se, nu, level))
    ok = (nu > 0) & (level > 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = delta / se  # SE = 0: +-inf (better / worse) or NaN (undecided)
        # z >= t_{1-level, nu} read as P(T <= -z) <= level: one CDF instead of a quantile's search,
        # of -|z| only (the small tail; the other is 1 minus it, as stdtr computes it)
        small = stdtr(np.where(ok, nu, 1.0), -np.abs(z))
    below, above = np.where(z >= 0.0, small, 1.0 - small), np.where(z >= 0.0, 1.0 - small, small)
    code = np.where(ok & (below <= level), CODE_BETTER, np.where(ok & (above <= level), CODE_WORSE, CODE_UNDECIDED))
    return int(code) if code.ndim == 0 else code


def rule_verdict(delta: float | None, se: float | None, nu: float, level: float) -> str:
    """verdict_code of one candidate, named: `better`, `worse` or `undecided` (also with no delta
    or no SE)."""
    if delta is None or se is None:
        return UNDECIDED
    return _VERDICT_OF_CODE[verdict_code(delta, se, nu, level)]


def _new_dof(n_before: int, added):
    """The repeat dof that `added` runs (an int or an array) bring to an arm of n_before runs: one
    each, except the arm's first run."""
    added = np.asarray(added)
    return added - ((n_before == 0) & (added > 0))


@dataclass(frozen=True)
class Arms:
    """What the verdict of one candidate depends on, for what-if questions (runs needed, design):
    s and the baseline model held fixed, run counts and dof free."""

    s: float
    n_v: int
    n_b: int  # local baseline runs
    nu: int  # pooled dof (prior included when kept)
    local_dof: int
    m: int
    ref_n: int | None = None  # the published reference's n (None: no reference mean in use)
    offset_sd: float = DEFAULT_OFFSET_SD
    use_ref: bool = False  # the published mean is part of the baseline
    alpha: float = ALPHA

    def with_runs(self, dv: int, db: int) -> "Arms":
        """dv more candidate runs and db more local baseline runs (each adds one dof, except an
        arm's first run)."""
        new_v, new_b = int(_new_dof(self.n_v, dv)), int(_new_dof(self.n_b, db))
        return Arms(self.s, self.n_v + dv, self.n_b + db, self.nu + new_v + new_b, self.local_dof + new_v + new_b,
                    self.m, self.ref_n, self.offset_sd, self.use_ref, self.alpha)

    def settles(self, effect: float) -> bool:
        """Would an observed |delta| = effect settle the verdict (better, or worse for a loss)?"""
        return self.n_v >= 1 and bool(self.settles_after(effect, np.zeros(1, dtype=int))[0])

    def settles_after(self, effect: float, r: np.ndarray, both: bool = False) -> np.ndarray:
        """with_runs(r, r if both else 0).settles(effect) for every r of the array at once (the
        runs-needed search asks a hundred of them per candidate per report; r = 0 is the arms as
        they are, with at least one candidate run)."""
        r = np.asarray(r, dtype=int)
        n_v, n_b = self.n_v + r, self.n_b + (r if both else 0)
        new = _new_dof(self.n_v, r) + _new_dof(self.n_b, r if both else 0)
        nu, local_dof = self.nu + new, self.local_dof + new
        s2 = self.s**2
        if both:
            vb = np.array([baseline_var(s2, int(b), self.ref_n, self.offset_sd, self.use_ref) for b in n_b])
        else:
            vb = baseline_var(s2, self.n_b, self.ref_n, self.offset_sd, self.use_ref)
            if vb is None:
                return np.zeros(r.shape, dtype=bool)
        lvl = np.array([look_level(int(j), self.m, int(d), self.alpha) for j, d in zip(n_v + n_b, local_dof)])
        return verdict_code(abs(effect), se_delta(s2, n_v, vb), nu, lvl) == CODE_BETTER


@dataclass(frozen=True)
class RuleRunsNeeded:
    """extra: candidate runs that would settle it; both_arms: runs on each arm when candidate runs
    alone never do (within MAX_RULE_RUNS); None otherwise. needs_baseline_runs: the second case."""

    extra: int | None
    needs_baseline_runs: bool = False
    both_arms: int | None = None


def rule_runs_needed(delta: float | None, arms: Arms | None, limit: int = MAX_RULE_RUNS) -> RuleRunsNeeded:
    """Smallest r in 1..limit with arms.with_runs(r, 0).settles(delta): the candidate runs that
    would settle the verdict (`better` for delta > 0, `worse` for delta < 0) if delta and s hold;
    else the smallest r with arms.with_runs(r, r).settles(delta). A linear search: the look's
    level falls beyond J_FLAT runs while a reference-only SE has a floor, so the condition need
    not be monotone in r. None when delta is 0 or unknown, the verdict is settled already, or
    nothing within `limit` settles it."""
    if delta is None or delta == 0.0 or arms is None or arms.s is None:
        return RuleRunsNeeded(None)
    if arms.settles(delta):
        return RuleRunsNeeded(None)
    extra = _first_settling(arms, delta, limit, both=False)
    if extra is not None:
        return RuleRunsNeeded(extra)
    return RuleRunsNeeded(None, True, _first_settling(arms, delta, limit, both=True))


def _first_settling(arms: Arms, delta: float, limit: int, both: bool) -> int | None:
    """The smallest r in 1..limit with arms.settles_after(delta, [r], both), searched in growing
    blocks: a question that settles mostly does so within a few runs, and each r costs a t CDF."""
    start = 1
    for stop in (8, 32, limit):
        stop = min(stop, limit)
        if stop < start:
            continue
        r = np.arange(start, stop + 1)
        first = np.flatnonzero(arms.settles_after(delta, r, both=both))
        if first.size:
            return int(r[first[0]])
        start = stop + 1
    return None


# ---------------------------------------------------------------- noise split


@dataclass(frozen=True)
class NoiseSplit:
    """tau2: training (re-run) variance; v_eval: mean eval-sampling variance; both points^2."""

    tau2: float | None
    v_eval: float | None
    eval_dominates: bool | None


def noise_split(s2: float | None, v: Sequence[float]) -> NoiseSplit:
    """tau^2 = max(0, s^2 - mean V_r) vs v_eval = mean V_r over the runs that have counts.

    eval_dominates (v_eval > tau^2) means more samples per problem would cut the noise more
    cheaply than re-training. Fields are None when s^2 or every V_r is missing.
    """
    vv = np.asarray(v, dtype=np.float64)
    v_eval = float(vv.mean()) if vv.size else None
    if s2 is None or v_eval is None:
        return NoiseSplit(None, v_eval, None)
    tau2 = max(0.0, float(s2) - v_eval)
    return NoiseSplit(tau2, v_eval, v_eval > tau2)


# ---------------------------------------------------------------- paired by problem


@dataclass(frozen=True)
class PairedSE:
    delta: float
    se: float
    n_problems: int


def paired_problem_se(cand: Sequence[Sequence[float]], base: Sequence[Sequence[float]]) -> PairedSE | None:
    """Paired by-problem SE of delta, on run-averaged per-problem fractions correct.

    cand, base: one row per run, one column per problem (c_i / k), columns aligned. With
    d_i = 100 (pbar_v,i - pbar_b,i): delta = mean_i d_i and SE = sd_i(d_i) / sqrt(n)
    (ddof = 1). This is the uncertainty about generalizing beyond these problems (problems as a
    sample from a population of similar ones); it is not the run-to-run noise. None for n < 2.
    """
    pv = np.asarray(cand, dtype=np.float64)
    pb = np.asarray(base, dtype=np.float64)
    if pv.ndim != 2 or pb.ndim != 2 or pv.shape[1] != pb.shape[1] or pv.shape[0] < 1 or pb.shape[0] < 1:
        raise ValueError("paired_problem_se: needs two runs x problems arrays with the same problems")
    n = pv.shape[1]
    if n < 2:
        return None
    d = 100.0 * (pv.mean(axis=0) - pb.mean(axis=0))
    return PairedSE(float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n)


# ---------------------------------------------------------------- futility (planner)


def futility_z(looks: int = FUTILITY_LOOKS, alpha: float = ALPHA) -> float:
    """z_{1 - alpha/looks}: Bonferroni over the looks (3 looks -> 2.128)."""
    from opsdctl.stats.special import ndtri

    return float(ndtri(1.0 - alpha / looks))


def futility_se(tau2: float, v_eval_k: float, s2: float, n_b: int) -> float:
    """SE_k of a partially evaluated run against the baseline mean:
    SE_k^2 = tau^2 + V_eval(k) + s^2 / n_b, with V_eval(k) = eval_variance(counts at look k, k)."""
    return math.sqrt(tau2 + v_eval_k + s2 / n_b)


def futility_stop(delta_k: float, se_k: float, z: float | None = None) -> bool:
    """Stop a losing evaluation when even an optimistic bound is below the baseline:
    delta_k + z SE_k < 0 (z = futility_z() by default)."""
    return delta_k + (futility_z() if z is None else z) * se_k < 0.0
