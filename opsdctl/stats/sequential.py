"""Alpha spending over repeated looks: the verdict's nominal level at each look.

Users and the adaptive policy re-run compare after every run, so a verdict must hold however
often it is looked at. compare is stateless, so the looks are indexed by what the store holds:
look j is the number of local runs in the comparison (candidate runs + local baseline runs),
which grows by one with every run of either arm. A look at every j is the worst case; looking
less often only spends less.

The boundary is a one-parameter family on the z scale, in the spirit of Wang & Tsiatis (1987)
shapes and the Lan & DeMets (1983) spending approach (Jennison & Turnbull 2000, ch. 2, 7):

    c_j = +inf                      j < J_MIN         (no verdict from fewer than 4 local runs)
    c_j = C                         J_MIN <= j <= J   (flat, Pocock-like, up to 8 runs)
    c_j = C (j / J)^GROWTH          j > J             (grows slowly: any number of looks)

C = boundary_constant(level) makes the chance that a Gaussian random walk S_j ~ N(0, j) (one
unit of information per run) ever crosses c_j sqrt(j), at any j >= 1, equal to `level`. It is
computed by recursive numerical integration (Armitage, McPherson & Rowe 1969) up to J_HORIZON
and a union bound beyond it (conservative). Verdicts use the nominal one-sided level
1 - Phi(c_j) with Student's t and the pooled dof (the "significance level" approach of
Jennison & Turnbull, ch. 11, for an estimated variance).

Pure functions; numpy and opsdctl.stats.special only.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

J_MIN = 4  # no verdict with fewer local runs in the comparison
J_FLAT = 8  # the boundary is flat up to this look (4 runs per arm) ...
GROWTH = 0.25  # ... and grows as (j / J_FLAT)^GROWTH beyond
J_HORIZON = 120  # exact recursion up to here, union bound beyond
GRID_H = 0.05  # integration grid step (standard deviations of one run's increment)

# boundary_constant(0.05 / m) for m = 1..32, from `python -m opsdctl.stats.sequential`
# (tests/unit/stats/test_sequential.py recomputes entries and checks them against simulation).
TABLE_ALPHA = 0.05
TABLE: tuple[float, ...] = (
    2.152357, 2.424473, 2.573408, 2.674879, 2.751386, 2.812563,
    2.863400, 2.906809, 2.944632, 2.978108, 3.008106, 3.035263,
    3.060056, 3.082853, 3.103943, 3.123556, 3.141879, 3.159068,
    3.175251, 3.190535, 3.205013, 3.218762, 3.231851, 3.244338,
    3.256275, 3.267707, 3.278673, 3.289209, 3.299347, 3.309114,
    3.318536, 3.327636,
)


def _shape(j: int) -> float:
    return math.inf if j < J_MIN else (1.0 if j <= J_FLAT else (j / J_FLAT) ** GROWTH)


def _propagate(x0: float, fw: np.ndarray, top: float, bottom: float, h: float) -> tuple[float, np.ndarray]:
    """The density of S_j = S_{j-1} + N(0, 1) on a grid y0 + i h that ends exactly at `top`,
    from the weighted density fw on the grid x0 + k h: f(y_i) = sum_k fw_k phi(y_i - x_k), a
    convolution because both grids have step h."""
    ny = int(math.ceil((top - bottom) / h)) + 1
    y0 = top - (ny - 1) * h
    d = y0 - x0  # y_i - x_k = d + (i - k) h
    m_lo, m_hi = math.ceil((-8.5 - d) / h), math.floor((8.5 - d) / h)
    kern = np.exp(-0.5 * (d + np.arange(m_lo, m_hi + 1) * h) ** 2) / math.sqrt(2 * math.pi)
    full = np.convolve(fw, kern)  # full[t] = sum_k fw_k kern[t - k]: i = t + m_lo
    f = np.zeros(ny)
    i = np.arange(ny)
    t = i - m_lo
    ok = (t >= 0) & (t < full.size)
    f[ok] = full[t[ok]]
    return y0, f


def crossing_probability(c: float, horizon: int = J_HORIZON, h: float = GRID_H) -> float:
    """P(S_j >= c * shape(j) * sqrt(j) for some j >= 1) for the Gaussian random walk S_j.

    Recursion on a grid: the mass crossing at look j is int f_{j-1}(x) (1 - Phi(b_j - x)) dx and
    f_j(y) = int f_{j-1}(x) phi(y - x) dx for y < b_j, over the paths still below the boundary
    (f_0 is a point mass at 0); each step's grid ends exactly at its boundary (trapezoid rule).
    Beyond `horizon`, a union bound.
    """
    from opsdctl.stats.special import ndtr

    total = 0.0
    x0, fw = 0.0, np.array([1.0])  # S_0 = 0: a point mass (weight 1)
    for j in range(1, horizon + 1):
        b = c * _shape(j) * math.sqrt(j)
        xs = x0 + h * np.arange(fw.size)
        if math.isfinite(b):
            total += float(np.sum(fw * ndtr(xs - b)))  # 1 - Phi(b - x) = Phi(x - b)
        top = b if math.isfinite(b) else xs[-1] + 8.5
        x0, f = _propagate(x0, fw, top, -8.5 * math.sqrt(j), h)
        fw = f * h
        fw[0] *= 0.5
        fw[-1] *= 0.5
    # union bound beyond the horizon (the boundary grows, so the terms fall fast)
    j = np.arange(horizon + 1, 100_000, dtype=np.float64)
    total += float(np.sum(ndtr(-c * (j / J_FLAT) ** GROWTH)))
    return total


def _solve(level: float) -> float:
    lo, hi = 0.5, 8.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if crossing_probability(mid) > level else (lo, mid)
        if hi - lo < 1e-6:
            break
    return 0.5 * (lo + hi)


@lru_cache(maxsize=None)
def boundary_constant(level: float) -> float:
    """C with crossing_probability(C) = level (from TABLE when level = 0.05 / m, m <= 32)."""
    if not 0.0 < level < 0.5:
        raise ValueError("boundary_constant: level must lie in (0, 0.5)")
    m = TABLE_ALPHA / level
    if TABLE and abs(m - round(m)) < 1e-9 and 1 <= round(m) <= len(TABLE):
        return TABLE[int(round(m)) - 1]
    return _solve(level)


@lru_cache(maxsize=4096)
def nominal_level(j: int, level: float) -> float:
    """One-sided nominal level of a verdict at look j (local runs in the comparison) when the
    family-wise level over every look is `level`; 0 for j < J_MIN (no verdict yet). Remembered:
    compare's runs-needed search asks the same few looks a thousand times a report."""
    from opsdctl.stats.special import ndtr

    s = _shape(int(j))
    if not math.isfinite(s):
        return 0.0
    return float(ndtr(-boundary_constant(level) * s))


if __name__ == "__main__":  # regenerate TABLE
    print("TABLE: tuple[float, ...] = (")
    vals = [_solve(TABLE_ALPHA / m) for m in range(1, 33)]
    for i in range(0, len(vals), 6):
        print("    " + " ".join(f"{v:.6f}," for v in vals[i:i + 6]))
    print(")")
