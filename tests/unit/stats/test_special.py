"""opsdctl.stats.special against scipy.special: the same values to a relative 1e-12 (the functions
the report evaluates), on grids that cover the statistics' use and their tails; the array path
element for element equal to the scalar path; larger arrays handed to scipy; edge values as
scipy gives them. Where scipy itself is the less accurate one (log B(a, b) with one tiny and one
huge argument, t near 0 on 1 dof) the reference is a closed form instead."""

import math

import numpy as np
import pytest
import scipy.special as sp

from opsdctl.stats import special

REL = 1e-12
P = np.concatenate([10.0 ** -np.arange(1.0, 30.0, 1.5), np.linspace(0.001, 0.999, 97), 1.0 - 10.0 ** -np.arange(3.0, 12.0)])
DFS = [0.3, 0.5, 1.0, 1.5, 2.0, 3.0, 4.7, 7.0, 10.0, 29.0, 100.0, 999.0, 1e4]


def close(got, want, rel=REL):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        return bool(np.all(same | (np.abs(got - want) <= rel * np.abs(want))))


def test_ndtr_and_ndtri():
    x = np.linspace(-37.0, 9.0, 2001)
    assert close(special.ndtr(x), sp.ndtr(x), 1e-13)
    assert close([special.ndtr(v) for v in x], special.ndtr(x), 0.0)  # scalar path == array path
    assert close([special.ndtri(p) for p in P], sp.ndtri(P))
    assert special.ndtri(0.5) == 0.0 and special.ndtri(0.0) == -math.inf and special.ndtri(1.0) == math.inf
    assert math.isnan(special.ndtr(math.nan)) and special.ndtr(-math.inf) == 0.0 and special.ndtr(math.inf) == 1.0


@pytest.mark.parametrize("df", DFS)
def test_t_cdf_and_quantile(df):
    t = np.concatenate([-np.logspace(-3, 6, 60), [0.0], np.logspace(-3, 6, 60)])
    want = sp.stdtr(df, t)
    keep = (want > 1e-250) & ((df != 1.0) | (np.abs(t) > 1e-2))  # scipy: 0 far out; 1 dof near 0: below
    rel = REL if df <= 1000 else 1e-11  # a = df/2 large: a log x carries x's rounding
    assert close(special.stdtr(df, t)[keep], want[keep], rel)
    q = special.stdtrit(df, P)
    assert close(q, sp.stdtrit(df, P), rel)
    assert close(special.stdtr(df, q), P, 10 * rel)  # the quantile inverts the CDF


def test_t_edges_and_closed_forms():
    # 1 dof: 1/2 + atan(t)/pi (atan(-1/t)/pi below -1, which keeps the tail's digits), where scipy
    # loses digits near 0
    for t in (-1e8, -3.0, -0.5, -1e-8, 1e-8, 2.5):
        want = math.atan(-1.0 / t) / math.pi if t < -1.0 else 0.5 + math.atan(t) / math.pi
        assert close(special.stdtr(1.0, t), want, 1e-14)
    assert special.stdtr(3.0, 0.0) == 0.5 and special.stdtr(math.inf, 1.3) == special.ndtr(1.3)
    assert special.stdtrit(5.0, 0.5) == 0.0 and special.stdtrit(5.0, 0.0) == -math.inf
    assert all(math.isnan(v) for v in (special.stdtr(0.0, 1.0), special.stdtrit(2.0, 1.5), special.stdtr(2.0, math.nan)))
    assert close(special.stdtr(3.0, -1e200), sp.stdtr(3.0, -1e200))  # t^2 overflows


@pytest.mark.parametrize("dfn", [1.0, 2.0, 3.0, 5.0, 10.0, 40.0, 200.0])
def test_f_survival_and_quantile(dfn):
    f = np.concatenate([[0.0], np.logspace(-5, 4, 50)])
    for dfd in (0.9, 2.0, 5.0, 10.0, 40.0, 200.0):
        want = sp.fdtrc(dfn, dfd, f)
        big = want > 1e-250  # scipy rounds far smaller tails to 0
        assert close(special.fdtrc(dfn, dfd, f)[big], want[big])
        q = np.array([1e-10, 1e-4, 0.01, 0.3, 0.5, 0.7, 0.99, 1.0 - 1e-6])
        assert close(special.fdtri(dfn, dfd, q), sp.fdtri(dfn, dfd, q), 1e-11)


@pytest.mark.parametrize("a", [0.1, 0.5, 1.0, 2.5, 12.5, 100.0, 4997.0, 1e5])
def test_gamma_quantile(a):
    q = np.array([1e-12, 1e-5, 0.001, 0.1, 0.5, 0.9, 0.99999, 1.0 - 1e-9])
    assert close(special.gammaincinv(a, q), sp.gammaincinv(a, q))


def test_betaln_and_the_log_products():
    ab = np.logspace(-2, 4, 25)
    a, b = (m.ravel() for m in np.meshgrid(ab, ab))
    # with one argument small and the other large scipy is the one off (by up to 5e-10, checked
    # against mpmath at 40 digits): there the series below is the reference
    ok = np.minimum(a, b) >= 2.0
    assert close(special.betaln(a, b)[ok], sp.betaln(a, b)[ok])
    assert close(special.betaln(a, b), sp.betaln(a, b), 1e-9)
    # one tiny and one huge argument, where lgamma differences (and scipy, at 1e-10) lose digits:
    # log B = lgamma(b) + log Gamma(a) - log Gamma(a + b), the last difference by its series in 1/a
    for big, tiny in ((1e6, 1e-3), (5e4, 0.0029)):
        psi, psi1 = math.log(big) - 0.5 / big - 1 / (12 * big**2), 1 / big + 0.5 / big**2
        want = math.lgamma(tiny) - tiny * psi - tiny**2 * psi1 / 2
        assert special.betaln(big, tiny) == pytest.approx(want, rel=1e-14)
    x = np.array([0.0, 1e-300, 0.3, 1.0])
    assert close(special.xlogy(0.0, x), sp.xlogy(0.0, x), 0.0) and close(special.xlogy(2.5, x), sp.xlogy(2.5, x), 1e-15)
    assert close(special.xlog1py(-0.5, -x[:3]), sp.xlog1py(-0.5, -x[:3]), 1e-15)


def test_large_arrays_go_to_scipy_and_agree():
    rng = np.random.default_rng(0)
    n = special.LOOP_MAX + 1
    nu, t = rng.uniform(0.5, 50.0, n), rng.normal(0.0, 3.0, n)
    big = special.stdtr(nu, t)
    small = special.stdtr(nu[:100], t[:100])
    assert big.shape == (n,) and close(big[:100], small)
    assert close(special.fdtrc(3.0, nu, np.abs(t)), sp.fdtrc(3.0, nu, np.abs(t)), 0.0)


def test_shapes_and_types_follow_scipy():
    assert isinstance(special.stdtr(3.0, 1.0), np.float64) and isinstance(special.ndtr(0.3), np.float64)
    assert special.stdtrit(np.array([[3.0], [4.0]]), np.array([0.1, 0.2, 0.3])).shape == (2, 3)
    assert special.ndtr(np.zeros((2, 0))).shape == (2, 0)
