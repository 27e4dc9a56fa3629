"""The forecasts read out of the forecast's posterior (opsdctl.stats.forecast.Mixture): each arm's
predictive mean, 80% interval, P(above the published mean), P(the best arm) and a candidate's
P(above the baseline). The posterior is a weighted set of normal nodes, so every figure but
p_best is exact: a mixture of normals' cdf and quantiles; p_best is a seeded Monte Carlo.
`mx` throughout: a Mixture (weight, b_mean, b_var, slab, slab_mean, slab_var, official_var)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

INTERVAL = 0.80  # the forecast interval's coverage
BEST_DRAWS = 60_000  # Monte Carlo draws for p_best: SE <= 0.5 / sqrt(draws) = 0.002
BEST_SEED = 25  # fixed: the same store gives the same p_best
BEST_CHUNK = 6_000  # p_best's draws per pass


@dataclass(frozen=True)
class ArmForecast:
    """The `forecast` of one arm in compare --json (points)."""

    mean: float
    low80: float
    high80: float
    p_above_reference: Optional[float]
    p_best: float
    p_above_baseline: Optional[float] = None  # P(its official mean beats the baseline's): P(effect > 0); None for the baseline

    def to_json(self) -> dict:
        return {"mean": self.mean, "low80": self.low80, "high80": self.high80,
                "p_above_reference": self.p_above_reference, "p_best": self.p_best,
                "p_above_baseline": self.p_above_baseline}


def components(mx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each arm's predictive of its official mean as a normal mixture: (weights, means,
    variances), (arms, components); the official runs' own noise included. Equal components
    are merged (with local baseline runs B's part is the same at every level and family node,
    and a side's update depends on the family's scale but not on its shares), and an arm with
    fewer is padded with weight 0: the quantile search passes over all of them a dozen times."""
    w, bm, bv = mx.weight, mx.b_mean, mx.b_var + mx.official_var
    k = mx.slab.shape[2]
    arms = [_merged(w, bm, bv)]
    for c in range(mx.slab.shape[1]):
        arms.append(_merged(np.concatenate([w * (1.0 - mx.slab[:, c].sum(axis=1))] + [w * mx.slab[:, c, j] for j in range(k)]),
                            np.concatenate([bm] + [bm + mx.slab_mean[:, c, j] for j in range(k)]),
                            np.concatenate([bv] + [bv + mx.slab_var[:, c, j] for j in range(k)])))
    n = max(a[0].size for a in arms)
    pad = lambda x, fill: np.concatenate([x, np.full(n - x.size, fill)])  # noqa: E731
    return (np.array([pad(a[0], 0.0) for a in arms]), np.array([pad(a[1], a[1][0]) for a in arms]),
            np.array([pad(a[2], a[2][0]) for a in arms]))

def forecasts(mx, reference_mean: Optional[float], draws: int = BEST_DRAWS,
              seed: int = BEST_SEED) -> tuple[ArmForecast, ...]:
    """Each arm's forecast of its official mean: predictive mean, 80% interval,
    P(> the published reference mean) and P(the highest of all arms), all from the exact
    mixture (an estimated noise is one of its dimensions: `posterior`)."""
    from opsdctl.stats.special import ndtr

    w, m, v = components(mx)
    sd = np.sqrt(np.maximum(v, 1e-300))
    pdf = lambda z: np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)  # noqa: E731
    mean = np.sum(w * m, axis=1)
    spread = np.sqrt(np.sum(w * (v + (m - mean[:, None]) ** 2), axis=1))
    bounds = []
    for q in (0.5 - INTERVAL / 2.0, 0.5 + INTERVAL / 2.0):
        # safeguarded Newton on the mixture's cdf, every arm at once: a step that leaves the
        # bracket is a bisection (spike and slab can make the cdf flat between two bumps)
        lo, hi = mean - 12.0 * spread - 1.0, mean + 12.0 * spread + 1.0
        x = mean + (q - 0.5) * 2.5631 * spread  # the moment-matched normal's quantile
        for _ in range(40):
            z = (x[:, None] - m) / sd
            f = np.sum(w * ndtr(z), axis=1) - q
            lo, hi = np.where(f < 0, x, lo), np.where(f < 0, hi, x)
            if np.all(np.abs(f) < 1e-10) or np.all(hi - lo < 1e-9):
                break
            step = x - f / np.maximum(np.sum(w * pdf(z) / sd, axis=1), 1e-300)
            x = np.where((step > lo) & (step < hi), step, 0.5 * (lo + hi))
        bounds.append(x)
    above = None if reference_mean is None else np.sum(
        w * ndtr((m - reference_mean) / sd), axis=1)
    best = p_best(mx, draws, seed)
    gain = p_effect_positive(mx)
    return tuple(ArmForecast(float(mean[i]), float(bounds[0][i]), float(bounds[1][i]),
                             None if above is None else float(min(1.0, max(0.0, above[i]))), float(best[i]),
                             None if i == 0 else float(gain[i - 1]))
                 for i in range(mean.size))

def p_effect_positive(mx) -> np.ndarray:
    """P(theta_c > 0) for each candidate: its official mean above the baseline's (the same
    official runs' noise on both sides left out: the submission is judged by its true mean). A
    null idea's effect is exactly 0, so only its slab's sides count."""
    return p_effect(mx, 0.0, above=True)


def p_effect(mx, x: float, above: bool) -> np.ndarray:
    """P(theta_c > x) (above) or P(theta_c < x) for each candidate, the null spike at 0 counted
    on the side of x it falls."""
    from opsdctl.stats.special import ndtr

    if mx.slab.shape[1] == 0:
        return np.zeros(0)
    z = (mx.slab_mean - x) / np.sqrt(np.maximum(mx.slab_var, 1e-300))
    side = np.sum(mx.slab * ndtr(z if above else -z), axis=2)
    null = 1.0 - mx.slab.sum(axis=2)
    if (0.0 > x) if above else (0.0 < x):
        side = side + null
    return np.clip(mx.weight @ side, 0.0, 1.0)


def p_best(mx, draws: int, seed: int) -> np.ndarray:
    """P(arm i's official mean is the highest), a seeded Monte Carlo over the mixture (the same
    store gives the same numbers; SE <= 0.5 / sqrt(draws)); one arm: 1. Drawn BEST_CHUNK at a
    time: memory stays a few MB however many candidates the store holds."""
    k = mx.slab.shape[1] + 1
    if k == 1:
        return np.ones(1)
    rng = np.random.default_rng(seed)
    off = np.sqrt(mx.official_var)
    wins = np.zeros(k, dtype=np.int64)
    # how many draws each node gets (one multinomial: no search per draw), then the draws node by node
    nodes = np.repeat(np.arange(mx.weight.size), rng.multinomial(draws, mx.weight / mx.weight.sum()))
    for start in range(0, draws, BEST_CHUNK):
        node = nodes[start:start + BEST_CHUNK]
        n = node.size
        x = (mx.b_mean[node] + np.sqrt(mx.b_var[node]) * rng.standard_normal(n))[:, None] \
            + off[node][:, None] * rng.standard_normal((n, k))
        # each candidate's part: side j when the uniform falls in [P(sides < j), P(sides <= j)),
        # the spike past them all
        u, z = rng.random((n, k - 1)), rng.standard_normal((n, k - 1))
        below = np.zeros((n, k - 1))
        for j in range(mx.slab.shape[2]):
            above = below + mx.slab[node, :, j]
            hit = (u >= below) & (u < above)
            x[:, 1:] += np.where(hit, mx.slab_mean[node, :, j] + np.sqrt(mx.slab_var[node, :, j]) * z, 0.0)
            below = above
        wins += np.bincount(np.argmax(x, axis=1), minlength=k)
    return wins / draws


def _merged(w: np.ndarray, m: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A normal mixture's equal components merged (their weights summed), those of weight 0 dropped."""
    keep = w > 0.0
    w, m, v = w[keep], m[keep], v[keep]
    order = np.lexsort((v, m))
    w, m, v = w[order], m[order], v[order]
    first = np.concatenate([[True], (m[1:] != m[:-1]) | (v[1:] != v[:-1])])
    return np.bincount(np.cumsum(first) - 1, weights=w), m[first], v[first]
