"""Two distribution functions the forecast needs, from opsdctl.stats.special.

`scipy.stats` costs about half a second to import (it builds every distribution's docstring) and
scipy.special 0.2 s, more than a whole `opsdctl compare` otherwise spends; opsdctl.stats.special
computes the few functions the statistics need. Tested against scipy.stats.
"""

from __future__ import annotations

import numpy as np


def beta_logpdf(x, a: float, b: float) -> np.ndarray:
    """log of the Beta(a, b) density at x in (0, 1): (a-1) log x + (b-1) log(1-x) - log B(a, b)."""
    from opsdctl.stats.special import betaln, xlog1py, xlogy

    x = np.asarray(x, dtype=float)
    return xlogy(a - 1.0, x) + xlog1py(b - 1.0, -x) - betaln(a, b)


def chi2_ppf(q: float, dof: float) -> float:
    """The q quantile of chi^2 on `dof` degrees of freedom: 2 P^-1(dof/2, q), the inverse of the
    regularized lower incomplete gamma function."""
    from opsdctl.stats.special import gammaincinv

    return 2.0 * float(gammaincinv(0.5 * dof, q))
