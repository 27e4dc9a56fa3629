"""The simulated benchmark world: what a session's runs score and how long their stages take.

- stage durations: train ~ U(16, 19) min, eval ~ U(22, 27) min (the users' figures, DEVELOPERS.md), and STAGE_GAP_S
  of idle GPU between stages (release wait + the next start), for every policy alike;
- the benchmark: 30 problems with fixed per-problem solve rates p_i (Beta quantiles, mean
  54.22%); a run of a variant with true effect e has a true mean u ~ N(54.22 + e, tau^2) and
  per-problem rates shifted on the logit scale to average u; each problem gets 12 Bernoulli
  samples, so avg@12, per-problem counts, V_eval and the looks at k = 4, 8 all exist;
  tau^2 = 1.48^2 - E[V_eval], so a run's total sd is the measured 1.48 points;
- the published reference (54.22, sd 1.48, n = 5) is in the config, as users have it, and the
  local setup sits exactly on it (offset 0; `offset` moves every run);
- a re-eval draws fresh samples of a trained chain's checkpoint (the same true mean u), so
  compare pools the two evals as one run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opsdctl.config import Reference

BASELINE = "baseline"
BASE_MEAN = 54.22
SIGMA = 1.48
REFERENCE = Reference(mean=BASE_MEAN, sd=SIGMA, n=5)
N_PROBLEMS = 30
K = 12
LOOKS = (4, 8)
TRAIN_MIN = (16.0, 19.0)
EVAL_MIN = (22.0, 27.0)
EVAL_LOAD_MIN = 1.5  # of an eval's duration, before sampling starts (model load, merge)
STAGE_GAP_S = 10.0
MARGIN_MIN = 5.0
PROFILE = "qwen3-1.7b"
HPARAMS = {"max_completion_length": 1024}
DEFAULT_EFFECTS = (0.0, 0.0, 1.0, 2.0, 3.0, -2.0)
BETA_AB = (0.13, 0.11)  # per-problem solve rates: mostly near 0 or 1, as on AIME
PROBLEM_IDS = tuple(f"P{i}" for i in range(N_PROBLEMS))


def _logit(p):
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def _shift_to_mean(logits: np.ndarray, target: float) -> np.ndarray:
    """Per-problem rates sigmoid(logit_i + c) whose mean is `target` (bisection on c)."""
    target = min(max(target, 0.005), 0.995)
    lo, hi = -15.0, 15.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < target:
            lo = mid
        else:
            hi = mid
    return 1.0 / (1.0 + np.exp(-(logits + 0.5 * (lo + hi))))


@dataclass
class World:
    logits: np.ndarray  # base per-problem logits (mean rate BASE_MEAN/100)
    tau2: float  # training variance, points^2
    v_eval: float  # eval-sampling variance of one run, points^2
    train_min: tuple = TRAIN_MIN  # a train stage's duration ~ U(lo, hi) minutes
    eval_min: tuple = EVAL_MIN

    @classmethod
    def make(cls, sigma: float = SIGMA, train_min: tuple = TRAIN_MIN, eval_min: tuple = EVAL_MIN) -> "World":
        """`sigma`: a run's total sd, points (training + eval sampling)."""
        from scipy.stats import beta

        q = (np.arange(N_PROBLEMS) + 0.5) / N_PROBLEMS
        p = _shift_to_mean(_logit(beta.ppf(q, *BETA_AB)), BASE_MEAN / 100.0)
        v = float(1e4 / N_PROBLEMS**2 * np.sum(p * (1 - p)) / K)
        return cls(_logit(p), max(0.0, sigma**2 - v), v, tuple(train_min), tuple(eval_min))

    def run(self, rng: np.random.Generator, effect: float) -> np.ndarray:
        """One run's samples: problems x K booleans (cumulative counts give the looks)."""
        return self.evaluate(rng, self.train(rng, effect))

    def train(self, rng: np.random.Generator, effect: float) -> float:
        """A training: its checkpoint's true mean score u, points."""
        return BASE_MEAN + effect + rng.normal(0.0, math.sqrt(self.tau2))

    def evaluate(self, rng: np.random.Generator, u: float) -> np.ndarray:
        """One evaluation (a fresh draw of samples) of a checkpoint of true mean u."""
        p = _shift_to_mean(self.logits, u / 100.0)
        return rng.random((N_PROBLEMS, K)) < p[:, None]

