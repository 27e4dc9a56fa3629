"""The bet's two rules that must hold in any world: the noise it forecasts with, and what to submit.

Pure functions of numbers and arrays; `compare` (the forecast's noise), `plan.submission`
(`pick_leader`) and benchmarks/worlds.py (the world suite) call these same functions.

The noise. The forecast's run variance pools the local within-arm scatter with the published sd
as a prior worth PRIOR_DOF degrees of freedom, always: s^2 = (nu0 s0^2 + SS) / (nu0 + nu_local).
The verdicts' pooling (opsdctl.stats.inference.prior_check) lets the local scatter discount the
prior; one discordant pair of baseline runs then left it 0.13 of its 4 dof and the forecast's
intervals tripled. Here data move s^2 as data of their dof do, no more: with a true sd twice the
published one the estimate still climbs as local dof come in.

The submission. Of the candidates, the one of highest forecast official mean, provided its
P(official mean above the baseline's) is at least P_SUBMIT and its forecast is above the
baseline's; else the baseline's empty recipe. The forecast's mean alone submitted a lucky idea seen
once whenever it led by a hair, and in a world of mostly harmful ideas that lost on average to
submitting the baseline. The threshold is the price of a wrong submission against a missed gain:
chosen on the world suite's tuning seeds (benchmarks/worlds.py) as the lowest value that keeps
P(worse than the baseline by more than a point) within its goal in every world.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

PRIOR_DOF = 4.0  # the published sd's weight, dof: the 5 re-trains it came from
P_SUBMIT = 0.80  # a candidate is submitted only at P(official mean > the baseline's) >= this


def noise_estimate(ss_local: float, nu_local: int, s0: Optional[float], nu0: float = PRIOR_DOF) -> tuple[Optional[float], float]:
    """(s^2, dof) of the run-to-run variance for the forecast: the local scatter SS on nu_local dof
    pooled with the published sd s0 at a fixed nu0 dof (None: no prior). (None, 0) with neither."""
    prior = float(nu0) if s0 is not None and s0 > 0 and nu0 > 0 else 0.0
    nu = prior + int(nu_local)
    if nu <= 0:
        return None, 0.0
    return (prior * float(s0 or 0.0) ** 2 + float(ss_local)) / nu, nu


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
