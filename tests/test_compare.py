"""build_report and render_compare on plain records (no store)."""

import io
import json
import math
import subprocess
import sys

import pytest
from rich.console import Console
from scipy import stats as ss

from opsdctl.stats import inference as stats
from opsdctl.stats.compare import (
    Reference,
    RunRecord,
    build_report,
    is_partial,
    render_compare,
)

REF = Reference(mean=54.22, sd=1.48, n=5)


def rec(variant, cid, score, k=12, n=30, counts=None, ids=None, partial=False):
    return RunRecord(variant, cid, score, k, n, counts, ids, partial)


def counted(variant, cid, counts, k=12, ids=None, partial=False):
    counts = tuple(counts)
    return RunRecord(variant, cid, stats.run_score(counts, k), k, len(counts), counts,
                     tuple(ids) if ids else None, partial)


def by_name(report, name, partial=False):
    (e,) = [e for e in report["variants"] if e["name"] == name and e.get("partial", False) == partial]
    return e


def dumps(report):
    return json.dumps(report, allow_nan=False)  # raises on NaN/inf; numpy types fail too


def render(report, width=170):
    con = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    render_compare(report, con)
    return con.export_text()


RUNS = [
    rec("baseline", 1, 54.0), rec("baseline", 2, 55.5), rec("baseline", 3, 53.5),
    rec("token-clip", 4, 57.0), rec("token-clip", 5, 58.5),
    rec("cosine", 6, 53.0),
    rec("left-pad", 7, 49.0),
]


def test_store_baseline_pooled_with_prior_by_hand():
    r = build_report(RUNS, baseline="baseline", reference=REF)
    dumps(r)
    b = r["baseline"]
    assert b["source"] == "runs" and b["n"] == 3 and b["mean"] == pytest.approx(54.333333333333336)
    # pooled: prior 4 * 1.48^2, baseline SS, token-clip SS; single runs add nothing
    ssb = sum((y - 54.333333333333336) ** 2 for y in (54.0, 55.5, 53.5))
    sst = 2 * 0.75**2
    s2 = (4 * 1.48**2 + ssb + sst) / (4 + 2 + 1)
    assert r["noise"]["nu"] == 7 and r["noise"]["s"] == pytest.approx(math.sqrt(s2), rel=1e-12)
    tc = by_name(r, "token-clip")
    se = math.sqrt(s2) * math.sqrt(1 / 2 + 1 / 3)
    delta = 57.75 - 54.333333333333336
    assert tc["delta"] == pytest.approx(delta) and tc["se"] == pytest.approx(se, rel=1e-12)
    assert tc["p_beat"] == pytest.approx(ss.t.cdf(delta / se, 7), rel=1e-10)
    half = ss.t.ppf(0.975, 7) * se
    assert tc["ci_low"] == pytest.approx(delta - half) and tc["ci_high"] == pytest.approx(delta + half)
    assert tc["sd"] == pytest.approx(math.sqrt(2 * 0.75**2)) and by_name(r, "cosine")["sd"] is None
    # Bonferroni over the 3 candidates shown
    assert r["bonferroni"]["m"] == 3 and r["bonferroni"]["better_at"] == pytest.approx(1 - 0.05 / 3)
    assert tc["verdict"] == stats.verdict(tc["p_beat"], 3)
    # sorted by P(beat), highest first
    ps = [e["p_beat"] for e in r["variants"]]
    assert ps == sorted(ps, reverse=True) and r["variants"][0]["name"] == "token-clip"
    for key in ("name", "n", "mean", "sd", "se", "delta", "ci_low", "ci_high", "p_beat", "verdict",
                "runs_needed", "partial"):
        assert all(key in e for e in r["variants"])


def test_reference_stands_in_without_baseline_runs():
    runs = [r for r in RUNS if r.variant != "baseline"]
    r = build_report(runs, baseline="baseline", reference=REF)
    b = r["baseline"]
    assert (b["source"], b["n"], b["mean"], b["runs"]) == ("reference", 5, 54.22, [])
    s2 = (4 * 1.48**2 + 2 * 0.75**2) / 5
    tc = by_name(r, "token-clip")
    assert tc["se"] == pytest.approx(math.sqrt(s2) * math.sqrt(1 / 2 + 1 / 5), rel=1e-12)
    assert tc["paired_se"] is None  # no per-problem counts for a published number
    assert "baseline (reference)" in render(r)


def test_prior_off_and_no_reference():
    off = build_report(RUNS, baseline="baseline", reference=Reference(54.22, 1.48, 5, prior=False))
    none = build_report(RUNS, baseline="baseline", reference=None)
    ssb = sum((y - 54.333333333333336) ** 2 for y in (54.0, 55.5, 53.5))
    for r in (off, none):
        assert r["noise"]["nu"] == 3 and r["noise"]["nu0"] == 0
        assert r["noise"]["s"] == pytest.approx(math.sqrt((ssb + 2 * 0.75**2) / 3), rel=1e-12)


def test_single_runs_without_prior_say_not_enough_runs():
    runs = [rec("baseline", 1, 54.0), rec("a", 2, 57.0), rec("b", 3, 50.0)]
    r = build_report(runs, baseline="baseline", reference=None)
    text = dumps(r)
    assert "not enough runs to estimate noise" in text
    assert r["noise"]["s"] is None and r["noise"]["nu"] == 0 and r["noise"]["note"] == stats.NOT_ENOUGH_RUNS
    a = by_name(r, "a")
    assert a["delta"] == 3.0 and a["se"] is None and a["p_beat"] is None and a["ci_low"] is None
    assert a["verdict"] == "undecided" and a["runs_needed"] is None and a["note"] == stats.NOT_ENOUGH_RUNS
    assert [e["name"] for e in r["variants"]] == ["a", "b"]  # by delta when there is no P(beat)
    assert all(d["runs_per_arm"] is None for d in r["design"])
    out = render(r)
    assert "not enough runs to estimate noise" in out and "nan" not in out.lower()
    assert "[baseline] reference" in out


def test_partial_runs_are_listed_apart_and_never_pooled():
    full_only = build_report(RUNS, baseline="baseline", reference=REF)
    runs = RUNS + [
        rec("token-clip", 8, 40.0, k=4, n=15),  # fewer samples and problems
        rec("token-clip", 9, 70.0, k=12, n=30, partial=True),  # flagged by the evaluator
        rec("cosine", 10, 60.0, k=12, n=15),  # fewer problems
        rec("baseline", 11, 45.0, k=4, n=30),  # fewer samples
    ]
    r = build_report(runs, baseline="baseline", reference=REF)
    dumps(r)
    assert r["full_k"] == 12 and r["full_n"] == 30
    assert r["noise"] == full_only["noise"]  # nothing partial got into the pool
    assert by_name(r, "token-clip") == by_name(full_only, "token-clip")
    parts = [e for e in r["variants"] if e["partial"]]
    assert {(e["name"], e["n_problems"], e["k"]) for e in parts} == {
        ("token-clip", 15, 4), ("token-clip", 30, 12), ("cosine", 15, 12), ("baseline", 30, 4)}
    assert all(e["delta"] is None and e["p_beat"] is None and e["verdict"] is None for e in parts)
    assert r["variants"][-len(parts):] == parts  # after the full candidates
    out = render(r)
    assert "Partial evaluations" in out and "15 x 4" in out


def test_is_partial_rules():
    assert is_partial(rec("a", 1, 50.0, partial=True), 12, 30)
    assert is_partial(rec("a", 1, 50.0, k=8), 12, 30)
    assert is_partial(rec("a", 1, 50.0, n=15), 12, 30)
    assert not is_partial(rec("a", 1, 50.0), 12, 30) and not is_partial(rec("a", 1, 50.0), None, None)
    # explicit full settings win over inference
    r = build_report([rec("baseline", 1, 54.0, k=8), rec("a", 2, 55.0, k=8)], baseline="baseline",
                     reference=REF, full_k=12)
    assert all(e["partial"] for e in r["variants"]) and r["baseline"]["source"] == "reference"


def test_eval_variance_and_runs_without_counts():
    ids = [f"p{i}" for i in range(4)]
    runs = [
        counted("baseline", 1, (0, 6, 12, 3), ids=ids), counted("baseline", 2, (1, 5, 12, 4), ids=ids),
        counted("a", 3, (2, 8, 11, 3), ids=ids), rec("a", 4, 55.0, n=4),  # FINAL line only
    ]
    r = build_report(runs, baseline="baseline", reference=REF)
    v = [stats.eval_variance(c, 12) for c in ((0, 6, 12, 3), (1, 5, 12, 4), (2, 8, 11, 3))]
    nz = r["noise"]
    assert nz["v_eval"] == pytest.approx(sum(v) / 3) and nz["runs_with_counts"] == 3
    assert nz["runs_without_counts"] == 1 and "without per-problem counts" in nz["v_eval_note"]
    s2 = nz["s"] ** 2
    assert nz["tau2"] == pytest.approx(max(0.0, s2 - sum(v) / 3))
    assert nz["eval_dominates"] == (nz["v_eval"] > nz["tau2"])
    out = render(r)
    assert "1 without per-problem counts left out" in out


def test_eval_dominated_noise_gives_the_samples_advice():
    ids = [f"p{i}" for i in range(30)]
    half = tuple([6] * 30)  # p = 1/2 everywhere: large V_r
    runs = [counted("baseline", i, half, ids=ids) for i in range(3)] + [counted("a", 9, half, ids=ids)]
    r = build_report(runs, baseline="baseline", reference=Reference(50.0, 1.0, 5))
    assert r["noise"]["eval_dominates"] and "more samples per problem" in r["noise"]["advice"]
    assert "more samples per problem" in render(r)


def test_paired_by_problem_se_aligns_problem_ids():
    ids = ["a", "b", "c", "d"]
    base = [counted("baseline", 1, (6, 6, 0, 12), ids=ids), counted("baseline", 2, (6, 4, 2, 12), ids=ids)]
    # the candidate's evaluator lists the problems in another order
    cand = [counted("x", 3, (12, 10, 1, 3), ids=["d", "a", "c", "b"])]
    r = build_report(base + cand, baseline="baseline", reference=REF)
    x = by_name(r, "x")
    want = stats.paired_problem_se([[10 / 12, 3 / 12, 1 / 12, 12 / 12]],
                                   [[6 / 12, 6 / 12, 0, 1], [6 / 12, 4 / 12, 2 / 12, 1]])
    assert x["paired_problems"] == 4
    assert x["paired_se"] == pytest.approx(want.se) and x["paired_delta"] == pytest.approx(want.delta)
    assert x["paired_delta"] == pytest.approx(x["delta"])  # same problems, every run counted
    assert "generalizing beyond these problems" in render(r)


def test_runs_needed_and_time_fit():
    runs = [rec("baseline", i, y) for i, y in enumerate((54.0, 54.5, 53.8, 54.4, 54.1))]
    runs += [rec("a", 10, 56.0), rec("b", 11, 52.0)]
    r = build_report(runs, baseline="baseline", reference=REF, chain_minutes=43.0, minutes_left=100.0)
    a, b = by_name(r, "a"), by_name(r, "b")
    want = stats.runs_needed(a["delta"], r["noise"]["s"], 1, 5, r["noise"]["nu"], 2)
    assert a["runs_needed"] == want.extra and a["runs_needed"] >= 1
    assert a["minutes_needed"] == pytest.approx(43.0 * a["runs_needed"])
    assert a["fits"] == (43.0 * a["runs_needed"] <= 100.0)
    assert b["runs_needed"] is None and b["minutes_needed"] is None  # negative delta
    for d in r["design"]:
        assert d["runs_per_arm"] == stats.design_runs_per_arm(d["effect"], r["noise"]["s"], 4, 2)
        assert d["chains"] == d["runs_per_arm"] + max(0, d["runs_per_arm"] - 5)
        assert d["fits"] == (d["minutes"] <= 100.0)
    out = render(r)
    assert "min" in out and "Design" in out and "100 min left" in out


def test_design_chains_against_the_reference_count_every_baseline_run():
    # Bug: against the published reference the design figure counted the reference's 5 runs as
    # baseline runs ("+2 points: 8 runs per arm, 11 chains"); the first local baseline run
    # replaces the reference, so a new candidate and its baseline need 8 + 8 = 16 chains.
    runs = [rec("a", 10, 56.0), rec("a", 11, 55.0)]
    r = build_report(runs, baseline="baseline", reference=REF, chain_minutes=43.0, minutes_left=1000.0)
    assert r["baseline"]["source"] == "reference"
    for d in r["design"]:
        assert d["runs_per_arm"] > 5 or d["effect"] == 3.0
        assert d["chains"] == 2 * d["runs_per_arm"]
        assert d["minutes"] == pytest.approx(43.0 * d["chains"])


def test_settled_verdict_has_no_runs_needed():
    runs = [rec("baseline", i, y) for i, y in enumerate((54.0, 54.5, 53.8))]
    runs += [rec("a", 10 + i, y) for i, y in enumerate((61.0, 60.5, 61.5))]
    r = build_report(runs, baseline="baseline", reference=REF)
    a = by_name(r, "a")
    assert a["verdict"] == "better" and a["runs_needed"] is None and not a["needs_baseline_runs"]
    assert "settled" in render(r)


def test_needs_baseline_runs_when_candidate_runs_cannot_settle_it():
    # n_b = 1 with a wide prior: delta sqrt(n_b) / s < z, so candidate runs alone never suffice.
    runs = [rec("baseline", 1, 54.0), rec("a", 2, 56.0), rec("a", 3, 57.0)]
    r = build_report(runs, baseline="baseline", reference=Reference(54.0, 3.0, 5))
    a = by_name(r, "a")
    assert a["runs_needed"] is None and a["needs_baseline_runs"] is True
    assert isinstance(a["runs_needed_both_arms"], int) and a["runs_needed_both_arms"] > 0
    dumps(r)
    assert "baseline too" in render(r)


def test_variants_filter_limits_pool_and_bonferroni():
    r = build_report(RUNS, baseline="baseline", reference=REF, variants=["cosine", "ghost"])
    assert r["bonferroni"]["m"] == 1
    assert r["noise"]["nu"] == 4 + 2  # prior + baseline only; token-clip not shown, not pooled
    assert [e["name"] for e in r["variants"]] == ["cosine", "ghost"]
    assert by_name(r, "ghost")["n"] == 0 and by_name(r, "ghost")["note"] == "no runs"
    assert "no runs" in render(r)


def test_no_baseline_at_all():
    r = build_report(RUNS, baseline="nope", reference=None)
    dumps(r)
    assert r["baseline"]["source"] is None and r["bonferroni"]["m"] == 0
    assert all(e["delta"] is None and e["verdict"] is None for e in r["variants"])
    assert "No baseline" in render(r)


def test_bad_records_are_refused():
    with pytest.raises(ValueError):
        build_report([rec("a", 1, float("nan"))], baseline="a", reference=None)
    with pytest.raises(ValueError):
        build_report([rec("a", 1, 50.0, n=30, counts=(1, 2))], baseline="a", reference=None)


def test_table_has_baseline_on_top_and_bonferroni_note():
    out = render(build_report(RUNS, baseline="baseline", reference=REF))
    lines = out.splitlines()
    order = [next(i for i, l in enumerate(lines) if l.startswith(f"│ {name}")) for name in
             ("baseline", "token-clip", "cosine", "left-pad")]
    assert order == sorted(order)
    assert "Bonferroni over m = 3" in out and "Noise: s =" in out and "nan" not in out.lower()


def test_import_is_cheap():
    code = ("import sys, opsdctl.stats.compare, opsdctl.stats.inference, opsdctl.stats.plots; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib', 'torch', 'rich')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_names_with_brackets_are_printed_verbatim():
    runs = [rec("base[v1]", 1, 54.0), rec("base[v1]", 2, 55.0), rec("clip[bold]", 3, 57.0)]
    out = render(build_report(runs, baseline="base[v1]", reference=REF))
    assert "base[v1] (baseline)" in out and "clip[bold]" in out
