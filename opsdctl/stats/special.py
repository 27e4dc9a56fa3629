"""The scipy.special functions the statistics use, in `math` and numpy, with scipy's names and
argument order: ndtr, ndtri, stdtr, stdtrit, fdtrc, fdtri, betaln, xlogy, xlog1py, gammaincinv.

Why: importing scipy.special costs about 0.2 s (it loads numpy.f2py, numpy.ma, numpy.testing and
numpy.random for its array-API layer), a third of what `compare` and `advise` may take in all,
while the report evaluates these functions a few hundred times. Each is computed here to float64
accuracy (tests/unit/stats/test_special.py holds them to scipy at a relative 1e-12 or better):

- the normal CDF from math.erfc; the incomplete beta and gamma functions by their continued
  fractions and series (modified Lentz), with log B(a, b) from Stirling's series for large
  arguments, where lgamma differences lose digits;
- quantiles by Newton's method on the log of the smaller tail, kept inside a bracket (bisection
  when a step leaves it), to the last bit.

Scalars and arrays up to LOOP_MAX elements are evaluated element by element here; larger arrays
(the simulator's studies) go to scipy.special itself, where the import is nothing against the
work and its C loops are faster. Scalars come back as numpy float64, as scipy's do.
"""

from __future__ import annotations

import math

import numpy as np

LOOP_MAX = 4096  # arrays above this many elements go to scipy.special
_SQRT1_2 = math.sqrt(0.5)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_EPS = 1e-16
_TINY = 1e-300
# Stirling's series for log Gamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2): B_2k / (2k (2k - 1)).
_STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400, 43867 / 244188)
_STIRLING_FROM = 10.0  # the series is exact to float64 from here on (its 10th term < 1e-17)


# ---------------------------------------------------------------- elementwise dispatch


def _apply(scalar, name: str, *args):
    """scalar(*args) elementwise over the broadcast args: a float64 for scalars, an array else."""
    if all(np.ndim(a) == 0 for a in args):
        return np.float64(scalar(*(float(a) for a in args)))
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in args))
    if arrays[0].size > LOOP_MAX:
        import scipy.special

        return getattr(scipy.special, name)(*arrays)
    flat = [a.ravel().tolist() for a in arrays]
    return np.array([scalar(*xs) for xs in zip(*flat)], dtype=np.float64).reshape(arrays[0].shape)


# ---------------------------------------------------------------- normal


def _ndtr(x: float) -> float:
    return 0.5 * math.erfc(-x * _SQRT1_2)


def ndtr(x):
    """Phi(x), the standard normal CDF (any array size: math.erfc element by element)."""
    if np.ndim(x) == 0:
        return np.float64(_ndtr(float(x)))
    a = np.asarray(x, dtype=np.float64)
    # map over the C function, no Python frame per element: the forecast asks for ~10^5 of them
    erfc = np.fromiter(map(math.erfc, (a * -_SQRT1_2).ravel().tolist()), dtype=np.float64, count=a.size)
    return 0.5 * erfc.reshape(a.shape)


def _log_ndtr_and_slope(x: float) -> tuple[float, float]:
    p = _ndtr(x)
    if p <= 0.0:
        return -math.inf, math.nan
    return math.log(p), math.exp(-0.5 * x * x - _HALF_LOG_2PI) / p


def _symmetric_edge(p: float):
    """A symmetric distribution's quantile where it needs no search (p 0, 1/2 or 1), else None."""
    return {0.0: -math.inf, 0.5: 0.0, 1.0: math.inf}.get(p)


def _ndtri(p: float) -> float:
    if math.isnan(p) or p < 0.0 or p > 1.0:
        return math.nan
    edge = _symmetric_edge(p)
    if edge is not None:
        return edge
    if p > 0.5:
        return -_ndtri(1.0 - p)
    return _solve(_log_ndtr_and_slope, math.log(p), -math.sqrt(-2.0 * math.log(p)) + 0.5, -math.inf, 0.0)


def ndtri(p):
    """Phi^-1(p), the standard normal quantile."""
    return _apply(_ndtri, "ndtri", p)


# ---------------------------------------------------------------- safeguarded Newton


def _solve(f, target: float, u: float, lo: float, hi: float) -> float:
    """u with f(u)[0] == target, f increasing in u and returning (value, slope): Newton's steps
    while they stay inside the bracket (lo, hi) that the signs so far give, else bisection (or a
    doubling step out of an unbounded side), until the step is below the last bit."""
    u = min(max(u, lo), hi) if math.isfinite(lo) and math.isfinite(hi) else u
    for _ in range(400):
        v, slope = f(u)
        g = v - target
        if g == 0.0:
            return u
        if g < 0.0:
            lo = u
        else:
            hi = u
        new = u - g / slope if math.isfinite(g) and slope > 0.0 and math.isfinite(slope) else math.nan
        if not lo < new < hi:
            if math.isinf(lo):
                new = u - max(1.0, abs(u))
            elif math.isinf(hi):
                new = u + max(1.0, abs(u))
            else:
                new = 0.5 * (lo + hi)
        if abs(new - u) <= 2.0 * _EPS * abs(new) or new in (lo, hi):
            return new
        u = new
    return u


def _solve_log_quantile(tail, p: float, u: float) -> float:
    """u = log x where a distribution on x > 0 has CDF p, solved on the smaller tail so that
    neither end loses digits. `tail(u, lower)`: (P(X <= x) if lower else P(X > x), the CDF's slope
    in log x), or None where x is off the distribution's range; u: the start."""
    lower = p <= 0.5

    def log_tail(u: float) -> tuple[float, float]:
        t = tail(u, lower)
        if t is None or t[0] <= 0.0:
            return (-math.inf if lower else math.inf), math.nan
        return (math.log(t[0]) if lower else -math.log(t[0])), t[1] / t[0]

    return _solve(log_tail, math.log(p) if lower else -math.log1p(-p), u, -math.inf, math.inf)


# ---------------------------------------------------------------- log Gamma and log Beta


def _stirling_rest(x: float) -> float:
    """log Gamma(x) - ((x - 1/2) log x - x + log(2 pi) / 2), for x >= _STIRLING_FROM."""
    r, x2, xp = 0.0, x * x, x
    for c in _STIRLING:
        r += c / xp
        xp *= x2
    return r


def _betaln(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    if a < _STIRLING_FROM or math.isinf(a):
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    # log Gamma(a) - log Gamma(a + b) from Stirling's series, whose large terms cancel exactly
    d = -(a - 0.5) * math.log1p(b / a) - b * math.log(a + b) + b + _stirling_rest(a) - _stirling_rest(a + b)
    if b < _STIRLING_FROM:
        return math.lgamma(b) + d
    return _HALF_LOG_2PI + (b - 0.5) * math.log(b) - b + _stirling_rest(b) + d


def betaln(a, b):
    """log |B(a, b)| for a, b > 0."""
    return _apply(_betaln, "betaln", a, b)


def xlogy(x, y):
    """x log y, 0 where x == 0."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x == 0.0, 0.0, x * np.log(y))
    return out if out.ndim else np.float64(out)


def xlog1py(x, y):
    """x log(1 + y), 0 where x == 0."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(x == 0.0, 0.0, x * np.log1p(y))
    return out if out.ndim else np.float64(out)


# ---------------------------------------------------------------- incomplete beta


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) a B(a, b) / (x^a (1-x)^b), by the modified Lentz method
    (converges fast for x < (a + 1) / (a + b + 2))."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 100000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            step = c * d
            h *= step
        if abs(step - 1.0) <= _EPS:
            break
    return h


def _ibeta_front(a: float, b: float, x: float, y: float) -> float:
    """x^a y^b / B(a, b) (y = 1 - x), through logs; the log of the one near 1 from the other, which
    holds its digits (a large `a` multiplies that log's rounding)."""
    log_x = math.log1p(-y) if x > 0.5 else math.log(x)
    log_y = math.log1p(-x) if y > 0.5 else math.log(y)
    return math.exp(a * log_x + b * log_y - _betaln(a, b))


def _ibeta(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b), the regularized incomplete beta function; y = 1 - x, passed exactly by the caller
    so that neither tail loses digits."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    if x * (a + b + 2.0) < a + 1.0:
        return _ibeta_front(a, b, x, y) * _beta_cf(a, b, x) / a
    return 1.0 - _ibeta_front(a, b, x, y) * _beta_cf(b, a, y) / b


def _ibetac(a: float, b: float, x: float, y: float) -> float:
    """1 - I_x(a, b) = I_y(b, a), computed from the side that keeps its digits."""
    return _ibeta(b, a, y, x)


# ---------------------------------------------------------------- Student's t


def _t_xy(df: float, t: float) -> tuple[float, float]:
    """(df / (df + t^2), t^2 / (df + t^2))."""
    if abs(t) > 1e150:  # t^2 would overflow; df / t^2 is exact enough beside 1
        return df / t / t, 1.0
    q = t * t
    return df / (df + q), q / (df + q)


def _stdtr(df: float, t: float) -> float:
    if math.isnan(df) or math.isnan(t) or df <= 0.0:
        return math.nan
    if math.isinf(df):
        return _ndtr(t)
    if t == 0.0:
        return 0.5
    x, y = _t_xy(df, t)
    tail = 0.5 * _ibeta(0.5 * df, 0.5, x, y)
    return tail if t < 0.0 else 1.0 - tail


def stdtr(df, t):
    """P(T <= t) for Student's t on df > 0 degrees of freedom."""
    return _apply(_stdtr, "stdtr", df, t)


def _stdtrit(df: float, p: float) -> float:
    if math.isnan(df) or math.isnan(p) or df <= 0.0 or p < 0.0 or p > 1.0:
        return math.nan
    edge = _symmetric_edge(p)
    if edge is not None:
        return edge
    if p > 0.5:
        return -_stdtrit(df, 1.0 - p)
    if math.isinf(df):
        return _ndtri(p)
    if df == 1.0:
        return -1.0 / math.tan(math.pi * p)  # Cauchy, through cot so that a tiny p keeps its digits
    if df == 2.0:
        return (2.0 * p - 1.0) / math.sqrt(2.0 * p * (1.0 - p))
    log_norm = -_betaln(0.5 * df, 0.5) - 0.5 * math.log(df)

    def log_cdf(t: float) -> tuple[float, float]:
        c = _stdtr(df, t)
        if c <= 0.0:
            return -math.inf, math.nan
        return math.log(c), math.exp(log_norm - 0.5 * (df + 1.0) * math.log1p(t * t / df)) / c

    z = _ndtri(p)  # start from the normal quantile with the first Cornish-Fisher terms
    start = z + (z**3 + z) / (4.0 * df) + (5.0 * z**5 + 16.0 * z**3 + 3.0 * z) / (96.0 * df * df)
    return _solve(log_cdf, math.log(p), min(start, -1e-300), -math.inf, 0.0)


def stdtrit(df, p):
    """The p quantile of Student's t on df > 0 degrees of freedom."""
    return _apply(_stdtrit, "stdtrit", df, p)


# ---------------------------------------------------------------- F


def _f_xy(dfn: float, dfd: float, f: float) -> tuple[float, float]:
    """(dfn f / (dfn f + dfd), dfd / (dfn f + dfd))."""
    nf = dfn * f
    if math.isinf(nf):
        return 1.0, 0.0
    return nf / (nf + dfd), dfd / (nf + dfd)


def _fdtrc(dfn: float, dfd: float, f: float) -> float:
    if math.isnan(dfn) or math.isnan(dfd) or math.isnan(f) or dfn <= 0.0 or dfd <= 0.0 or f < 0.0:
        return math.nan
    x, y = _f_xy(dfn, dfd, f)
    return _ibetac(0.5 * dfn, 0.5 * dfd, x, y)


def fdtrc(dfn, dfd, f):
    """P(F > f) for the F distribution on (dfn, dfd) degrees of freedom."""
    return _apply(_fdtrc, "fdtrc", dfn, dfd, f)


def _fdtri(dfn: float, dfd: float, p: float) -> float:
    if math.isnan(dfn) or math.isnan(dfd) or math.isnan(p) or dfn <= 0.0 or dfd <= 0.0 or p < 0.0 or p > 1.0:
        return math.nan
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return math.inf
    a, b = 0.5 * dfn, 0.5 * dfd

    def tail(u: float, lower: bool):
        x, y = _f_xy(dfn, dfd, math.exp(u))
        if x <= 0.0 or y <= 0.0:
            return None
        # d I_x / d log f = x^a y^b / B(a, b)
        return (_ibeta(a, b, x, y) if lower else _ibetac(a, b, x, y)), _ibeta_front(a, b, x, y)

    return math.exp(_solve_log_quantile(tail, p, 0.0))


def fdtri(dfn, dfd, p):
    """The p quantile of the F distribution on (dfn, dfd) degrees of freedom."""
    return _apply(_fdtri, "fdtri", dfn, dfd, p)


# ---------------------------------------------------------------- incomplete gamma


def _gamma_front(a: float, x: float) -> float:
    """x^a e^-x / Gamma(a), through logs: for a large, a (log(x/a) - (x-a)/a) + log(a)/2 - log(2 pi)/2
    less Stirling's rest, whose terms are small where a log x, x and lgamma(a) are each large."""
    if a < _STIRLING_FROM:
        return math.exp(a * math.log(x) - x - math.lgamma(a))
    d = (x - a) / a
    return math.exp(a * (math.log1p(d) - d) + 0.5 * math.log(a) - _HALF_LOG_2PI - _stirling_rest(a))


def _gammainc_pq(a: float, x: float) -> tuple[float, float]:
    """(P(a, x), Q(a, x)), the regularized incomplete gamma functions, each from the side that
    keeps its digits: the series of P below x = a + 1, the continued fraction of Q above."""
    if x <= 0.0:
        return 0.0, 1.0
    if math.isinf(x):
        return 1.0, 0.0
    front = _gamma_front(a, x)
    if x < a + 1.0:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * _EPS:
            n += 1.0
            term *= x / n
            total += term
        p = front * total
        return p, 1.0 - p
    b = x + 1.0 - a  # Lentz on Q's continued fraction
    c, d = 1.0 / _TINY, 1.0 / b
    h = d
    for i in range(1, 100000):
        num = -i * (i - a)
        b += 2.0
        d = num * d + b
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = b + num / c
        c = c if abs(c) > _TINY else _TINY
        step = c * d
        h *= step
        if abs(step - 1.0) <= _EPS:
            break
    q = front * h
    return 1.0 - q, q


def _gammaincinv(a: float, q: float) -> float:
    if math.isnan(a) or math.isnan(q) or a <= 0.0 or q < 0.0 or q > 1.0:
        return math.nan
    if q == 0.0:
        return 0.0
    if q == 1.0:
        return math.inf

    def tail(u: float, lower: bool):
        x = math.exp(u)
        p_, q_ = _gammainc_pq(a, x)
        return (p_ if lower else q_), _gamma_front(a, x)  # d P / d log x = x^a e^-x / Gamma(a)

    z = _ndtri(q)  # Wilson-Hilferty's start
    c = 1.0 / (9.0 * a)
    start = a * max(1.0 - c + z * math.sqrt(c), 1e-3) ** 3
    return math.exp(_solve_log_quantile(tail, q, math.log(start)))


def gammaincinv(a, q):
    """x with P(a, x) = q, the inverse of the regularized lower incomplete gamma function."""
    return _apply(_gammaincinv, "gammaincinv", a, q)
