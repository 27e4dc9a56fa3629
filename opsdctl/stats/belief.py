"""What one more observation is worth to the submission, under the forecast's belief.

The belief is the forecast's joint posterior (opsdctl.stats.forecast): latents z = (B, o, D_1..D_K),
B the baseline's official mean, o the user's setup offset, D_i candidate i's effect; official means
B (baseline) and B + D_i; a local run of candidate i observes B + o + D_i (of the baseline B + o)
with the run-to-run variance s^2 = tau^2 (training) + v_eval (eval sampling).

Observations the next action can make (all linear in z, so the knowledge gradient is exact):
  repeat i / baseline  one more full run:            noise s^2
  re-eval i            fresh eval samples of a checkpoint already scored once: pooling its two
                       evals cuts that run's variance from tau^2 + v to tau^2 + v/2, the same
                       information as one observation of noise 1 / (1/(tau^2+v/2) - 1/(tau^2+v))
                       (of a checkpoint with e evals: tau^2 + v/e -> tau^2 + v/(e+1))
  new                  a fresh idea from the family: a new latent D ~ N(family_mean, family_sd^2),
                       one full run (noise s^2); it can be chosen only once observed
  screen               a fresh idea, one run with a partial eval read against the baseline's
                       partial on the same problems: noise tau^2 + 2 v_eval x (full / partial samples)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from opsdctl.stats import forecast
from opsdctl.stats.knowledge_gradient import knowledge_gradient, thresholded_gain, update_direction
from opsdctl.stats.screen import screen_se


@dataclass(frozen=True)
class Belief:
    arms: tuple[str, ...]  # arms[0]: the baseline
    mean: np.ndarray  # posterior mean of z = (B, o, D_1..D_K)
    cov: np.ndarray  # posterior covariance of z
    tau2: float  # training variance of one run (points^2)
    v_eval: Optional[float]  # eval-sampling variance of one full run; None: unknown (no counts)
    family_mean: float
    family_sd: float

    @property
    def s2(self) -> float:
        return self.tau2 + (self.v_eval or 0.0)

    def official_mean(self) -> np.ndarray:
        return forecast.official_map(len(self.arms)) @ self.mean

    def gain_run(self, arm: int, noise_var: Optional[float] = None) -> float:
        """Knowledge gradient of one more full run of `arm` (0: the baseline)."""
        k = len(self.arms)
        b = forecast.official_map(k) @ update_direction(self.cov, forecast.obs_row(arm, k),
                                                        self.s2 if noise_var is None else noise_var)
        return knowledge_gradient(self.official_mean(), b)

    def gain_confirm(self, arm: int, noise_var: Optional[float] = None) -> float:
        """What one more full run of `arm` (0: the baseline) is worth to the submission rule as it
        is, thresholded on P(above the baseline) (knowledge_gradient.thresholded_gain): a run of a
        leader short of the threshold can carry it over, which the knowledge gradient, taking the
        highest mean whatever its odds, does not count."""
        k = len(self.arms)
        a_map = forecast.official_map(k)
        u = update_direction(self.cov, forecast.obs_row(arm, k), self.s2 if noise_var is None else noise_var)
        if not u.any():  # nothing to learn (update_direction: a zero direction)
            return 0.0
        after = self.cov - np.outer(u, u)  # the covariance once the run is seen
        return thresholded_gain(self.official_mean(), a_map @ u, _gain_sd(a_map @ after @ a_map.T),
                                _gain_sd(a_map @ self.cov @ a_map.T))

    def reeval_noise(self, evals: int = 1) -> Optional[float]:
        """The noise of the observation a re-eval is worth (see the module docstring), of a run
        whose checkpoint has `evals` evaluations pooled already: tau^2 + v/e -> tau^2 + v/(e+1)."""
        if not self.v_eval or evals < 1:
            return None
        extra = 1.0 / (self.tau2 + self.v_eval / (evals + 1.0)) - 1.0 / (self.tau2 + self.v_eval / evals)
        return 1.0 / extra

    def gain_new(self, noise_var: Optional[float] = None) -> float:
        """Knowledge gradient of a fresh idea's first run: the belief gets one more arm."""
        k = len(self.arms)
        mean = np.append(self.mean, self.family_mean)
        cov = np.zeros((k + 2, k + 2))
        cov[: k + 1, : k + 1] = self.cov
        cov[k + 1, k + 1] = self.family_sd**2
        m, h = forecast.official_map(k + 1), forecast.obs_row(k, k + 1)
        b = m @ update_direction(cov, h, self.s2 if noise_var is None else noise_var)
        return knowledge_gradient(m @ mean, b, now=[True] * k + [False])

    def screen_noise(self, sample_share: float) -> Optional[float]:
        """Noise of a screen read against the baseline's partial on the same problems: the
        candidate's training noise plus both partials' eval sampling (share: partial / full samples)."""
        if not self.v_eval or sample_share <= 0:
            return None
        return screen_se(self.tau2, self.v_eval, sample_share) ** 2


def _gain_sd(cov: np.ndarray) -> np.ndarray:
    """sd of each candidate's official mean minus the baseline's, from the arms' covariance."""
    d = np.diag(cov)
    return np.sqrt(np.maximum(d[1:] + d[0] - 2.0 * cov[0, 1:], 0.0))


def from_posterior(post: forecast.Posterior) -> Belief:
    """The belief of the forecast's posterior (opsdctl.stats.forecast, the one model of the
    official score), as its first two moments. A fresh idea's effect: the family's (null or slab)
    with the hyperparameters' posterior, by its mean and sd; its link to the tried ideas through
    the hyperparameters is left out."""
    return Belief(post.names, post.state_mean, post.state_cov, post.noise.train_var, post.noise.eval_var or None,
                  post.new_mean, post.new_sd)


def from_report(report) -> Optional[Belief]:
    """The belief of a compare report (opsdctl.stats.report.Report): the forecast's own posterior,
    which the report carries; None without a noise estimate."""
    post = report.posterior
    return None if post is None else from_posterior(post)
