"""The knowledge gradient: what one more observation is worth to a decision that takes the best mean.

With a Gaussian belief, the arms' means after one observation move together along one direction:
mu_i' = a_i + b_i Z, Z ~ N(0, 1), where a is today's mean vector and b = Sigma h / sqrt(h' Sigma h + N)
for an observation h' theta + noise of variance N (Frazier, Powell & Dayanik 2009). The decision
takes the arm of highest mean, so the observation is worth E[max_i (a_i + b_i Z)] - max_i a_i.
E[max] of lines in Z is exact: the upper envelope of the lines is piecewise linear, and each of its
segments contributes a closed-form Gaussian integral.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np


def _f(z: float) -> float:
    """z Phi(z) + phi(z) = E[max(Z + z, 0)]: one breakpoint's share, at z = -|c|."""
    return z * 0.5 * math.erfc(-z / math.sqrt(2.0)) + math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def expected_max(a: Sequence[float], b: Sequence[float]) -> float:
    """E[max_i (a_i + b_i Z)], Z ~ N(0, 1), exactly (float64)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError("a and b must be non-empty vectors of one length")
    # by slope, then intercept: among equal slopes only the highest line can be on the envelope
    order = np.lexsort((a, b))
    lines: list[tuple[float, float]] = []
    for i in order:
        if lines and b[i] == lines[-1][1]:
            lines[-1] = (float(a[i]), float(b[i]))
        else:
            lines.append((float(a[i]), float(b[i])))
    # upper envelope: env[k] is on top for z in [cuts[k], cuts[k+1])
    env: list[tuple[float, float]] = []
    cuts: list[float] = []
    for ai, bi in lines:
        while env:
            aj, bj = env[-1]
            c = (aj - ai) / (bi - bj)  # where the steeper line i overtakes j
            if len(env) > 1 and c <= cuts[-1]:
                env.pop()
                cuts.pop()
                continue
            break
        cuts.append(-math.inf if not env else (env[-1][0] - ai) / (bi - env[-1][1]))
        env.append((ai, bi))
    # E[max] = max_i a_i + sum over the breakpoints of (b_{k+1} - b_k) f(-|c_{k+1}|)
    gain = sum((env[k + 1][1] - env[k][1]) * _f(-abs(cuts[k + 1])) for k in range(len(env) - 1))
    return float(a.max()) + gain


def knowledge_gradient(a: Sequence[float], b: Sequence[float], now: Optional[Sequence[bool]] = None) -> float:
    """E[max_i mu_i after the observation] - max_i mu_i now. `now`: the arms the decision may take
    today (default all); an arm not yet tried (a new idea) counts only after it is observed."""
    a_arr = np.asarray(a, dtype=np.float64)
    today = a_arr.max() if now is None else a_arr[np.asarray(now, dtype=bool)].max()
    return max(0.0, expected_max(a, b) - float(today))


def update_direction(cov: np.ndarray, h: Sequence[float], noise_var: float) -> np.ndarray:
    """b: how the posterior means move per unit Z after observing h' theta + N(0, noise_var)."""
    h = np.asarray(h, dtype=np.float64)
    sh = cov @ h
    v = float(h @ sh) + float(noise_var)
    if v <= 0.0:
        return np.zeros_like(sh)
    return sh / math.sqrt(v)


def thresholded_gain(a: Sequence[float], b: Sequence[float], sd_after: Sequence[float], sd_now: Sequence[float],
                     now: Optional[Sequence[bool]] = None, threshold: Optional[float] = None) -> float:
    """What an observation is worth to the submission rule as it is (opsdctl.stats.bet.choose: the
    highest mean among candidates at P(above the baseline) >= the threshold), where the knowledge
    gradient assumes the highest mean is taken whatever its odds. Gaussian what-if: the arms' means
    move to a + b Z (arm 0: the baseline), each candidate's gain over the baseline then has sd
    `sd_after` (`sd_now` today) and P(above the baseline) Phi(gain / sd). The value of a decision is
    the chosen candidate's gain (0: the baseline); returns E[value after] - value now, at least 0,
    by a 401-point rule on Z in +-6 (the value jumps where a candidate crosses the threshold, so a
    Gauss-Hermite rule would miss it). A confirmatory run of a leader short of the threshold is
    worth its chance of carrying it over. `now`: the arms the rule may take today (a new idea
    only after it is observed)."""
    from opsdctl.stats import bet
    from opsdctl.stats.special import ndtr

    t = bet.P_SUBMIT if threshold is None else float(threshold)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    sa, sn = np.asarray(sd_after, dtype=np.float64), np.asarray(sd_now, dtype=np.float64)
    if a.size < 2:
        return 0.0
    z = np.linspace(-6.0, 6.0, 401)
    w = np.exp(-0.5 * z * z)
    w /= w.sum()
    m = a[None, :] + b[None, :] * z[:, None]
    gain = m[:, 1:] - m[:, :1]
    p = ndtr(gain / np.maximum(sa, 1e-12)[None, :])
    i = bet.choose_many(m[:, 1:], p, m[:, 0], t)
    after = float(w @ np.where(i >= 0, np.take_along_axis(gain, np.maximum(i, 0)[:, None], axis=1)[:, 0], 0.0))
    g0 = a[1:] - a[0]
    p0 = ndtr(g0 / np.maximum(sn, 1e-12))
    if now is not None:  # an arm not yet tried cannot be taken today
        p0 = np.where(np.asarray(now, dtype=bool)[1:], p0, -1.0)
    j = int(bet.choose_many(a[None, 1:], p0[None, :], a[:1], t)[0])
    return max(0.0, after - (float(g0[j]) if j >= 0 else 0.0))
