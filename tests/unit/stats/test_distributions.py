"""The forecast's two distribution functions (opsdctl.stats.distributions) against scipy.stats."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from opsdctl.stats.distributions import beta_logpdf, chi2_ppf


@pytest.mark.parametrize("a,b", [(1e-3, 1e-3), (0.5, 2.0), (1.0, 1.0), (3.2, 0.7), (40.0, 160.0)])
def test_beta_logpdf_is_scipys(a, b):
    x = (np.arange(40) + 0.5) / 40
    assert beta_logpdf(x, a, b) == pytest.approx(stats.beta.logpdf(x, a, b), rel=1e-10, abs=1e-10)


@pytest.mark.parametrize("dof", [0.5, 1.0, 1.36, 4.0, 9.36, 30.0, 400.0])
@pytest.mark.parametrize("q", [1e-4, 0.005, 0.5, 0.995, 1 - 1e-4])
def test_chi2_ppf_is_scipys(q, dof):
    assert chi2_ppf(q, dof) == pytest.approx(float(stats.chi2.ppf(q, dof)), rel=1e-10)
