"""The typed compare report prints exactly the `compare --json` document the dict-building
build_report printed (report_golden.json, written by it over tests/support/report_cases.py), and
carries the forecast's posterior for the advice."""

from __future__ import annotations

import json

import pytest

from opsdctl.stats import report as rp
from opsdctl.stats.compare import build_report
from tests.support.close import assert_same_doc, differences, perturb_floats
from tests.support.report_cases import GOLDEN, cases, store_fill_runs


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def all_cases(tmp_path_factory):
    return cases(store_fill_runs(tmp_path_factory.mktemp("fill")))


@pytest.mark.parametrize("name", ["session", "shown_family", "reference_only", "no_prior", "no_baseline",
                                  "single_runs", "empty", "store_fill"])
def test_to_json_is_the_old_document(golden, all_cases, name):
    runs, kw = all_cases[name]
    rep = build_report(runs, **kw)
    doc = rep.to_json()
    # Floats to a relative 1e-9 (a new numpy/scipy or another CPU moves the last digit); keys, key
    # order (--json prints it), strings, integers and None exactly.
    assert_same_doc(json.loads(json.dumps(doc)), golden[name])


@pytest.mark.parametrize("name", ["session", "store_fill"])
def test_the_golden_comparison_ignores_the_15th_digit_but_not_a_printed_one(golden, name):
    want = golden[name]
    assert_same_doc(perturb_floats(want, 3e-15), want)  # what a library release may move
    assert_same_doc(perturb_floats(want, -3e-15), want)
    assert differences(perturb_floats(want, 1e-6), want)  # what a reader of 4 decimals could see
    renamed = dict(want, extra=None)
    assert differences(renamed, want)  # a key more
    reordered = dict(reversed(list(want.items())))
    assert differences(reordered, want)  # key order: --json prints it
    first = want["variants"][0]
    changed = dict(want, variants=[dict(first, name=first["name"] + "x")] + want["variants"][1:])
    assert differences(changed, want)  # strings exactly


def test_report_parts_are_typed(all_cases):
    rep = build_report(*all_cases["session"][:1], **all_cases["session"][1])
    assert isinstance(rep.baseline, rp.Baseline) and isinstance(rep.noise, rp.Noise)
    assert {type(e) for e in rep.entries} == {rp.Entry, rp.PartialEntry}
    assert rep.spending.m == rep.to_json()["alpha_spending"]["m"]  # the attribute says what the key holds
    assert rep.posterior is not None and set(rep.posterior.names) >= {e.name for e in rep.full if e.name != "ckpt"}
    assert "posterior" not in rep.to_json()
    with pytest.raises(AttributeError):
        rep.baseline.mean = 0.0  # frozen


def test_the_live_rule_against_scipy_in_float64():
    """build_report's numbers are the inference functions', recomputed here by hand in float64 with
    scipy.stats: the pooled s^2 with the weighted prior, the baseline combined with the published
    mean, delta, SE, the 95% CI, P(beat) and the verdict at the look's level."""
    import numpy as np
    from scipy import stats as ss

    from opsdctl.config import Reference
    from opsdctl.stats import inference
    from opsdctl.stats.compare import RunRecord

    ref = Reference(54.22, 1.48, 5)
    data = {"baseline": [54.1, 55.3, 53.2, 54.8], "a": [57.9, 58.6, 56.4, 58.1], "b": [52.0, 55.5]}
    runs = [RunRecord(v, 10 * j + i, y, 12, 30, None, None, False)
            for j, (v, ys) in enumerate(data.items()) for i, y in enumerate(ys)]
    rep = build_report(runs, baseline="baseline", reference=ref)
    ys = {v: np.array(y, dtype=np.float64) for v, y in data.items()}
    ss_local = sum(float(((y - y.mean()) ** 2).sum()) for y in ys.values())
    nu_local = sum(len(y) - 1 for y in ys.values())
    p_prior = ss.f.sf(ss_local / nu_local / 1.48**2, nu_local, 4)
    w = min(1.0, p_prior / inference.PRIOR_FULL_AT)
    nu = w * 4 + nu_local
    s2 = (w * 4 * 1.48**2 + ss_local) / nu
    assert rep.noise.s == pytest.approx(np.sqrt(s2), rel=1e-12) and rep.noise.nu == pytest.approx(nu, rel=1e-12)
    yb, nb = ys["baseline"].mean(), len(ys["baseline"])
    diff_se2 = s2 * (1 / nb + 1 / 5)
    offset2 = 1.0 + max(0.0, (yb - 54.22) ** 2 - diff_se2)
    v_ref = s2 / 5 + offset2
    b_var = 1 / (nb / s2 + 1 / v_ref)
    b_mean = b_var * (nb / s2 * yb + 54.22 / v_ref)
    assert rep.baseline.mean == pytest.approx(b_mean, rel=1e-12)
    assert rep.baseline.se_mean == pytest.approx(np.sqrt(b_var), rel=1e-12)
    for v in ("a", "b"):
        e = rep.entry(v)
        delta = ys[v].mean() - b_mean
        se = np.sqrt(s2 / len(ys[v]) + b_var)
        half = ss.t.ppf(0.975, nu) * se
        assert e.delta == pytest.approx(delta, rel=1e-12) and e.se_delta == pytest.approx(se, rel=1e-12)
        assert (e.ci_low, e.ci_high) == (pytest.approx(delta - half, rel=1e-12), pytest.approx(delta + half, rel=1e-12))
        assert e.p_beat == pytest.approx(ss.t.cdf(delta / se, nu), rel=1e-12)
        level = inference.look_level(len(ys[v]) + nb, rep.spending.m, nu_local)
        want = ("better" if ss.t.cdf(delta / se, nu) >= 1 - level else
                "worse" if ss.t.cdf(delta / se, nu) <= level else "undecided")
        assert e.verdict == want
    assert rep.entry("a").verdict == "better"  # the case exercises a verdict, not only "undecided"


def test_the_advice_values_the_reports_own_posterior(all_cases):
    """One posterior: the belief the advice ranks by is the forecast's, carried on the report."""
    import numpy as np

    from opsdctl.stats import belief

    runs, kw = all_cases["session"]
    rep = build_report(runs, **kw)
    b = belief.from_report(rep)
    assert b.arms == rep.posterior.names
    assert np.array_equal(b.mean, rep.posterior.state_mean) and np.array_equal(b.cov, rep.posterior.state_cov)
    means = {n: f.mean for n, f in zip(rep.posterior.names, rep.posterior.forecasts())}
    assert means[rep.entry("token-clip").name] == pytest.approx(rep.entry("token-clip").forecast.mean, rel=1e-12)
    none = build_report(*all_cases["single_runs"][:1], **all_cases["single_runs"][1])
    assert none.posterior is None and belief.from_report(none) is None
