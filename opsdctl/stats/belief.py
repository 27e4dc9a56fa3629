"""A Gaussian belief about every arm's official mean, and what one more observation is worth to it.

Latents z = (B, o, D_1 .. D_K): B the baseline's official mean, o the user's setup offset from the
official setup, D_i candidate i's effect. Official means: baseline B, candidate i B + D_i. Prior:
B ~ N(published mean, sd^2 / n) (flat without a reference), o ~ N(0, offset_sd^2), and the effects
drawn from the family, D_i ~ N(family_mean, family_sd^2) (a hierarchical normal model: the spread
by moments over the candidates' deltas when there are FAMILY_MIN of them, else the default).
A local run of candidate i observes B + o + D_i (of the baseline: B + o) with the run-to-run
variance s^2 = tau^2 (training) + v_eval (eval sampling); runs are summarised by their means.

Observations the next action can make (all linear in z, so the knowledge gradient is exact):
  repeat i / baseline  one more full run:            noise s^2
  re-eval i            fresh eval samples of a checkpoint already scored: averaging its two
                       evals cuts that run's variance from tau^2 + v to tau^2 + v/2, the same
                       information as one observation of noise 1 / (1/(tau^2+v/2) - 1/(tau^2+v))
  new                  a fresh idea from the family: a new latent D ~ N(family_mean, family_sd^2),
                       one full run (noise s^2); it can be chosen only once observed
  screen               a fresh idea, one run with a partial eval read against the baseline's
                       partial on the same problems: noise tau^2 + 2 v_eval x (full / partial samples)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from opsdctl.stats.knowledge_gradient import knowledge_gradient, update_direction
from opsdctl.stats.screen import DEFAULT_FAMILY_SD, screen_se
FAMILY_MIN = 4  # candidates with runs before the family's spread is estimated from them
FLAT_SD = 100.0  # points: the baseline's official mean without a published reference


@dataclass(frozen=True)
class Belief:
    arms: tuple[str, ...]  # arms[0]: the baseline
    mean: np.ndarray  # posterior mean of z = (B, o, D_1..D_K)
    cov: np.ndarray  # posterior covariance of z
    tau2: float  # training variance of one run (points^2)
    v_eval: Optional[float]  # eval-sampling variance of one full run; None: unknown (no counts)
    family_mean: float
    family_sd: float
    family_source: str  # "estimated" | "default"

    @property
    def s2(self) -> float:
        return self.tau2 + (self.v_eval or 0.0)

    def _m(self) -> np.ndarray:
        """Official means = M z."""
        k = len(self.arms)
        m = np.zeros((k, k + 1))
        m[:, 0] = 1.0
        for i in range(1, k):
            m[i, i + 1] = 1.0
        return m

    def official_mean(self) -> np.ndarray:
        return self._m() @ self.mean

    def official_cov(self) -> np.ndarray:
        m = self._m()
        return m @ self.cov @ m.T

    def best(self) -> int:
        return int(np.argmax(self.official_mean()))

    def _run(self, arm: int) -> np.ndarray:
        """What a local run of arm observes: B + o (+ D_arm)."""
        h = np.zeros(len(self.arms) + 1)
        h[0] = h[1] = 1.0
        if arm > 0:
            h[arm + 1] = 1.0
        return h

    def gain_run(self, arm: int, noise_var: Optional[float] = None) -> float:
        """Knowledge gradient of one more full run of `arm` (0: the baseline)."""
        m = self._m()
        b = m @ update_direction(self.cov, self._run(arm), self.s2 if noise_var is None else noise_var)
        return knowledge_gradient(self.official_mean(), b)

    def reeval_noise(self) -> Optional[float]:
        """The noise of the observation a re-eval is worth (see the module docstring)."""
        if not self.v_eval:
            return None
        extra = 1.0 / (self.tau2 + self.v_eval / 2.0) - 1.0 / (self.tau2 + self.v_eval)
        return 1.0 / extra

    def gain_new(self, noise_var: Optional[float] = None) -> float:
        """Knowledge gradient of a fresh idea's first run: the belief gets one more arm."""
        k = len(self.arms)
        mean = np.append(self.mean, self.family_mean)
        cov = np.zeros((k + 2, k + 2))
        cov[: k + 1, : k + 1] = self.cov
        cov[k + 1, k + 1] = self.family_sd**2
        m = np.zeros((k + 1, k + 2))
        m[:, 0] = 1.0
        for i in range(1, k + 1):
            m[i, i + 1] = 1.0
        h = np.zeros(k + 2)
        h[0] = h[1] = h[k + 1] = 1.0
        b = m @ update_direction(cov, h, self.s2 if noise_var is None else noise_var)
        return knowledge_gradient(m @ mean, b, now=[True] * k + [False])

    def screen_noise(self, sample_share: float) -> Optional[float]:
        """Noise of a screen read against the baseline's partial on the same problems: the
        candidate's training noise plus both partials' eval sampling (share: partial / full samples)."""
        if not self.v_eval or sample_share <= 0:
            return None
        return screen_se(self.tau2, self.v_eval, sample_share) ** 2


def family_prior(deltas: Sequence[float], ses: Sequence[float]) -> tuple[float, float, str]:
    """(mean, sd, source) of the family's effects: by moments over the candidates' observed deltas
    (their spread less their own sampling variance) with FAMILY_MIN or more, else (0, default)."""
    if len(deltas) < FAMILY_MIN:
        return 0.0, DEFAULT_FAMILY_SD, "default"
    d = np.asarray(deltas, dtype=np.float64)
    var = float(d.var(ddof=1)) - (float(np.mean(np.square(ses))) if len(ses) else 0.0)
    return float(d.mean()), math.sqrt(max(var, 0.25)), "estimated"


def posterior(arms: Sequence[str], runs: Sequence[tuple[int, float]], s2: float, tau2: float,
              v_eval: Optional[float], ref_mean: Optional[float], ref_var: Optional[float],
              offset_sd: float, family: tuple[float, float, str]) -> Belief:
    """The belief after `runs` = [(n_i, mean_i)] per arm (arms[0] the baseline; n_i = 0: none)."""
    k = len(arms)
    fam_mean, fam_sd, fam_src = family
    m0 = np.zeros(k + 1)
    p0 = np.zeros(k + 1)
    local = [y for n, y in runs if n]
    m0[0] = ref_mean if ref_mean is not None else (float(np.mean(local)) if local else 0.0)
    p0[0] = ref_var if ref_mean is not None and ref_var else FLAT_SD**2
    p0[1] = max(offset_sd, 1e-6) ** 2 if ref_mean is not None else FLAT_SD**2
    m0[2:] = fam_mean
    p0[2:] = fam_sd**2
    prec = np.diag(1.0 / p0)
    rhs = prec @ m0
    for arm, (n, y) in enumerate(runs):
        if not n:
            continue
        h = np.zeros(k + 1)
        h[0] = h[1] = 1.0
        if arm > 0:
            h[arm + 1] = 1.0
        w = n / s2
        prec += w * np.outer(h, h)
        rhs += w * y * h
    cov = np.linalg.inv(prec)
    cov = (cov + cov.T) / 2.0
    return Belief(tuple(arms), cov @ rhs, cov, float(tau2), v_eval, fam_mean, fam_sd, fam_src)


def from_report(report: dict) -> Optional[Belief]:
    """The belief of a compare report (`opsdctl compare --json`): its noise, baseline and full
    candidates; None without a noise estimate."""
    nz, b = report["noise"], report["baseline"]
    if nz.get("s") is None:
        return None
    s2 = float(nz["s"]) ** 2
    v_eval = nz.get("v_eval")
    tau2 = float(nz["tau2"]) if nz.get("tau2") is not None else s2
    v_eval = None if v_eval is None else min(float(v_eval), s2)
    cands = [e for e in report["variants"] if not e.get("partial") and e.get("n")]
    ref = b.get("reference") or {}
    ref_mean = ref.get("mean")
    ref_var = (float(ref["sd"]) ** 2 / float(ref["n"])) if ref_mean is not None and ref.get("n") else None
    offset_sd = float(ref.get("offset_sd") or 0.0)
    base_runs = b.get("runs") or []
    runs = [(len(base_runs), float(np.mean(base_runs)) if base_runs else 0.0)]
    runs += [(int(e["n"]), float(e["mean"])) for e in cands]
    fam = family_prior([e["delta"] for e in cands if e.get("delta") is not None],
                       [e["se"] for e in cands if e.get("delta") is not None and e.get("se") is not None])
    return posterior([b.get("name") or "baseline"] + [e["name"] for e in cands], runs, s2, tau2, v_eval,
                     None if ref_mean is None else float(ref_mean), ref_var, offset_sd, fam)
