"""Operating characteristics of the compare verdicts, through build_report (issue 3).

Seeded, so deterministic; runs in a few seconds.
"""

import numpy as np

from opsdctl.stats.compare import Reference, RunRecord, build_report

SIGMA = 1.5
REFERENCE = Reference(mean=54.22, sd=1.48, n=5)  # the config's prior, as users have it


def _verdict(base_scores, cand_scores):
    runs = [RunRecord("baseline", i, float(y), 12, 30, None, None, False) for i, y in enumerate(base_scores)]
    runs += [RunRecord("cand", 100 + i, float(y), 12, 30, None, None, False) for i, y in enumerate(cand_scores)]
    rep = build_report(runs, baseline="baseline", reference=REFERENCE)
    (entry,) = rep["variants"]
    return entry["verdict"]


def test_null_comparisons_rarely_say_better():
    rng = np.random.default_rng(20240603)
    n_sims, better = 2000, 0
    for _ in range(n_sims):
        n_b, n_v = rng.integers(1, 4, size=2)
        base = rng.normal(54.0, SIGMA, n_b)
        cand = rng.normal(54.0, SIGMA, n_v)  # no true effect
        better += _verdict(base, cand) == "better"
    assert better / n_sims <= 0.06


def test_true_four_point_effect_with_three_runs_is_found():
    rng = np.random.default_rng(7)
    n_sims, better = 2000, 0
    for _ in range(n_sims):
        base = rng.normal(54.0, SIGMA, 3)
        cand = rng.normal(58.0, SIGMA, 3)
        better += _verdict(base, cand) == "better"
    assert better / n_sims >= 0.80


def test_family_of_three_null_candidates_stays_within_alpha():
    # Bonferroni over m = 3: P(any `better`) <= 5% when none is better.
    rng = np.random.default_rng(11)
    n_sims, any_better = 1000, 0
    for _ in range(n_sims):
        runs = [RunRecord("baseline", i, float(y), 12, 30, None, None, False)
                for i, y in enumerate(rng.normal(54.0, SIGMA, rng.integers(1, 4)))]
        for v in ("a", "b", "c"):
            runs += [RunRecord(v, 0, float(y), 12, 30, None, None, False)
                     for y in rng.normal(54.0, SIGMA, rng.integers(1, 4))]
        rep = build_report(runs, baseline="baseline", reference=REFERENCE)
        assert rep["bonferroni"]["m"] == 3
        any_better += any(e["verdict"] == "better" for e in rep["variants"])
    assert any_better / n_sims <= 0.05
