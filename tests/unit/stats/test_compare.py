"""build_report and its terminal table (opsdctl.cli.compare_table) on plain records (no store)."""

import io
import json
import math

import numpy as np
import pytest
from rich.console import Console
from scipy import stats as ss

from opsdctl.stats import inference as stats
from opsdctl.cli.compare_table import render_compare
from opsdctl.stats.compare import Reference, RunRecord, is_partial
from opsdctl.stats.compare import build_report as build
from tests.support.report_doc import report as typed


def build_report(*args, **kw) -> dict:
    """The `compare --json` document of the typed report: what these tests read."""
    return build(*args, **kw).to_json()

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


def render(report, width=170, explain=True):
    """compare's text; with `explain` (what these tests read), the notes behind the table too."""
    con = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    render_compare(typed(report), con, explain=explain)
    return con.export_text()


RUNS = [
    rec("baseline", 1, 54.0), rec("baseline", 2, 55.5), rec("baseline", 3, 53.5),
    rec("token-clip", 4, 57.0), rec("token-clip", 5, 58.5),
    rec("cosine", 6, 53.0),
    rec("left-pad", 7, 49.0),
]


def _nominal(j, m):
    """The look's one-sided level by hand from the boundary constant (tests/unit/stats/test_sequential.py
    checks the constant against a simulation)."""
    from opsdctl.stats import sequential

    if j < sequential.J_MIN:
        return 0.0
    shape = 1.0 if j <= sequential.J_FLAT else (j / sequential.J_FLAT) ** sequential.GROWTH
    return ss.norm.sf(sequential.boundary_constant(0.05 / m) * shape)


def test_store_baseline_combined_with_the_reference_by_hand():
    r = build_report(RUNS, baseline="baseline", reference=REF)
    dumps(r)
    b, nz = r["baseline"], r["noise"]
    ybar_b = 54.333333333333336
    # pooled over every variant: prior 4 * 1.48^2 (kept: the local scatter is small), baseline SS,
    # token-clip SS; single runs add nothing
    ssb = sum((y - ybar_b) ** 2 for y in (54.0, 55.5, 53.5))
    sst = 2 * 0.75**2
    # the prior's weight: min(1, p / 0.5) of the one-sided F test of the local scatter against it
    p = ss.f.sf((ssb + sst) / 3 / 1.48**2, 3, 4)
    assert nz["nu_local"] == 3 and nz["prior_check"]["p"] == pytest.approx(p, rel=1e-10)
    w = min(1.0, p / 0.5)
    assert nz["prior_check"]["kept"] and nz["prior_check"]["weight"] == pytest.approx(w) and nz["nu0"] == 4 * w
    s2 = (4 * w * 1.48**2 + ssb + sst) / (4 * w + 2 + 1)
    assert nz["nu"] == 4 * w + 3 and nz["s"] == pytest.approx(math.sqrt(s2), rel=1e-12)
    # the published mean: tested against the 3 local runs (no offset term), then combined by precision
    # with the offset sd widened by the difference sampling does not explain
    diff, se_d = ybar_b - 54.22, math.sqrt(s2) * math.sqrt(1 / 3 + 1 / 5)
    rc = b["reference_check"]
    assert rc["diff"] == pytest.approx(diff) and rc["se"] == pytest.approx(se_d, rel=1e-12)
    assert rc["p"] == pytest.approx(2 * ss.t.sf(abs(diff) / se_d, 7), rel=1e-10) and not rc["significant"]
    o2 = 1.0 + max(0.0, diff**2 - se_d**2)  # offset_sd defaults to 1 point
    v_ref = s2 / 5 + o2
    w_l, w_r = 3 / s2, 1 / v_ref
    assert b["source"] == "runs+reference" and b["n"] == 3 and b["offset_sd"] == pytest.approx(math.sqrt(o2))
    assert b["mean"] == pytest.approx((w_l * ybar_b + w_r * 54.22) / (w_l + w_r), rel=1e-12)
    assert b["se_mean"] == pytest.approx(math.sqrt(1 / (w_l + w_r)), rel=1e-12)
    tc = by_name(r, "token-clip")
    se = math.sqrt(s2 / 2 + 1 / (w_l + w_r))
    delta = 57.75 - b["mean"]
    assert tc["delta"] == pytest.approx(delta) and tc["se"] == pytest.approx(se, rel=1e-12)
    assert tc["p_beat"] == pytest.approx(ss.t.cdf(delta / se, 7), rel=1e-10)
    half = ss.t.ppf(0.975, 7) * se
    assert tc["ci_low"] == pytest.approx(delta - half) and tc["ci_high"] == pytest.approx(delta + half)
    assert tc["sd"] == pytest.approx(math.sqrt(2 * 0.75**2)) and by_name(r, "cosine")["sd"] is None
    # no verdict yet: 3 local repeat dof cannot check the prior (4 needed)
    assert r["alpha_spending"]["m"] == 3 and tc["look"] == 5 and tc["verdict"] == "undecided"
    assert tc["better_at"] is None and "repeat dof" in tc["note"]
    # sorted by P(beat), highest first
    ps = [e["p_beat"] for e in r["variants"]]
    assert ps == sorted(ps, reverse=True) and r["variants"][0]["name"] == "token-clip"
    for key in ("name", "n", "mean", "sd", "se", "delta", "ci_low", "ci_high", "p_beat", "verdict",
                "runs_needed", "runs_needed_worse", "look", "better_at", "partial"):
        assert all(key in e for e in r["variants"])


def test_verdict_level_is_the_looks_by_hand():
    runs = RUNS + [rec("cosine", 8, 52.5), rec("token-clip", 9, 58.0)]  # 5 local repeat dof now
    r = build_report(runs, baseline="baseline", reference=REF)
    tc = by_name(r, "token-clip")
    level = _nominal(3 + 3, 3)  # look j = 3 candidate runs + 3 baseline runs, m = 3
    assert tc["look"] == 6 and tc["better_at"] == pytest.approx(1 - level, rel=1e-12)
    want = "better" if tc["p_beat"] >= 1 - level else "worse" if tc["p_beat"] <= level else "undecided"
    assert tc["verdict"] == want
    assert r["alpha_spending"]["better_at"] == pytest.approx(1 - _nominal(4, 3), rel=1e-12)


def test_reference_stands_in_without_baseline_runs_with_its_offset():
    runs = [r for r in RUNS if r.variant != "baseline"]
    r = build_report(runs, baseline="baseline", reference=REF)
    b = r["baseline"]
    assert (b["source"], b["n"], b["mean"], b["runs"]) == ("reference", 5, 54.22, [])
    s2 = (4 * 1.48**2 + 2 * 0.75**2) / 5
    tc = by_name(r, "token-clip")
    # the published mean's own sampling variance plus the setup offset (1 point)
    assert tc["se"] == pytest.approx(math.sqrt(s2 / 2 + s2 / 5 + 1.0), rel=1e-12)
    assert b["se_mean"] == pytest.approx(math.sqrt(s2 / 5 + 1.0), rel=1e-12)
    # what one or two local baseline runs would buy: the combined SE
    buy = {x["runs"]: x["se_mean"] for x in b["local_runs_would_buy"]}
    for k in (1, 2):
        assert buy[k] == pytest.approx(math.sqrt(1 / (k / s2 + 1 / (s2 / 5 + 1.0))), rel=1e-12)
    assert tc["paired_se"] is None  # no per-problem counts for a published number
    out = render(r, width=250)
    assert "baseline (reference)" in out and "1 local baseline run would make it" in out
    # a smaller offset in the config narrows it
    r0 = build_report(runs, baseline="baseline", reference=Reference(54.22, 1.48, 5, offset_sd=0.0))
    assert by_name(r0, "token-clip")["se"] == pytest.approx(math.sqrt(s2 / 2 + s2 / 5), rel=1e-12)


def test_published_mean_fades_when_the_local_baseline_differs():
    # a local setup 4 points above the published mean: the offset sd widens to the difference seen,
    # so the published mean keeps only a small weight (no switch at a test's level)
    ys_b = (58.0, 58.6, 57.5, 58.3)
    runs = [rec("baseline", i, y) for i, y in enumerate(ys_b)]
    runs += [rec("a", 10 + i, y) for i, y in enumerate((58.5, 59.0, 58.1))]
    r = build_report(runs, baseline="baseline", reference=REF)
    b, s2 = r["baseline"], r["noise"]["s"] ** 2
    assert b["reference_check"]["significant"] and b["source"] == "runs+reference"
    ybar = sum(ys_b) / 4
    diff, se2 = ybar - 54.22, s2 * (1 / 4 + 1 / 5)
    o2 = 1.0 + diff**2 - se2
    assert b["offset_sd"] == pytest.approx(math.sqrt(o2), rel=1e-12)
    w_l, w_r = 4 / s2, 1 / (s2 / 5 + o2)
    assert b["mean"] == pytest.approx((w_l * ybar + w_r * 54.22) / (w_l + w_r), rel=1e-12)
    assert abs(b["mean"] - ybar) < 0.1  # mostly the local runs
    assert by_name(r, "a")["se"] == pytest.approx(math.sqrt(s2 / 3 + 1 / (w_l + w_r)), rel=1e-12)
    assert "widened from 1 to fit the difference seen" in " ".join(render(r, width=250).split())


def test_the_down_weighting_note_states_the_rule_it_applies():
    """3 baseline runs at sd 1.40 against the published 1.48 (5 runs, 4 dof): the local scatter is
    smaller, yet the prior keeps 95% of its dof, because full weight needs the F test's p >= 0.5,
    which on 2 dof means s <= 1.35 (the median scatter 1.48 predicts). The note gives that reason
    and never calls 1.40 larger than 1.48."""
    runs = [rec("baseline", i + 1, 54.22 + d) for i, d in enumerate((-1.40, 0.0, 1.40))]
    r = build_report(runs, baseline="baseline", reference=REF)
    assert r["noise"]["s_local"] == pytest.approx(1.40, rel=1e-12)
    p = ss.f.sf(1.40**2 / 1.48**2, 2, 4)
    limit = 1.48 * math.sqrt(ss.f.ppf(0.5, 2, 4))
    assert r["noise"]["prior_check"]["weight"] == pytest.approx(p / 0.5, rel=1e-9) and f"{p / 0.5:.0%}" == "95%"
    (note,) = [n for n in r["notes"] if n.startswith("prior down-weighted")]
    assert f"{limit:.2f}" == "1.35"
    assert (f"the published sd 1.48 keeps its full weight while the local scatter on 2 dof is at most 1.35 "
            f"(F test p >= 0.5); s = 1.40 gives p = {p:.3f}, so it keeps 95% of its 4 dof") in note
    assert "larger" not in note


def test_prior_is_down_weighted_when_the_local_scatter_is_too_large():
    ys = {"baseline": (50.0, 55.0, 58.0), "a": (52.0, 59.0, 55.0)}
    runs = [rec(v, 10 * i + j, y) for i, (v, yy) in enumerate(ys.items()) for j, y in enumerate(yy)]
    r = build_report(runs, baseline="baseline", reference=REF)
    nz = r["noise"]
    ssl = sum(sum((y - sum(yy) / 3) ** 2 for y in yy) for yy in ys.values())
    p = ss.f.sf(ssl / 4 / 1.48**2, 4, 4)
    w = min(1.0, p / 0.5)
    assert nz["prior_check"]["p"] == pytest.approx(p, rel=1e-10) and 0 < w < 1
    assert nz["prior_check"]["weight"] == pytest.approx(w) and nz["nu0"] == pytest.approx(4 * w)
    assert nz["nu"] == pytest.approx(4 + 4 * w)
    assert nz["s"] == pytest.approx(math.sqrt((4 * w * 1.48**2 + ssl) / (4 + 4 * w)), rel=1e-12)
    assert any(n.startswith("prior down-weighted") for n in r["notes"])
    assert f"weight {w:.0%}" in " ".join(render(r, width=250).split())
    # smooth: a little more scatter moves the weight a little, never a jump to 0
    ys2 = {"baseline": (50.0, 55.0, 58.1), "a": (52.0, 59.0, 55.0)}
    runs2 = [rec(v, 10 * i + j, y) for i, (v, yy) in enumerate(ys2.items()) for j, y in enumerate(yy)]
    w2 = build_report(runs2, baseline="baseline", reference=REF)["noise"]["prior_check"]["weight"]
    assert 0 < w2 < w and w - w2 < 0.02


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
    assert r["screen"] is None  # no noise estimate: nothing to say what a screen resolves
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
    out = " ".join(render(r, width=250).split())
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
    r = build_report(base + cand, baseline="baseline", reference=None)  # the local baseline alone
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
    r = build_report(runs, baseline="baseline", reference=REF, chain_minutes=43.0, minutes_left=300.0)
    a, b = by_name(r, "a"), by_name(r, "b")
    nz, base = r["noise"], r["baseline"]
    arms = stats.Arms(nz["s"], 1, 5, nz["nu"], nz["nu_local"], 2, 5, 1.0, base["source"] == "runs+reference")
    want = stats.rule_runs_needed(a["delta"], arms)
    assert a["runs_needed"] == want.extra and a["runs_needed"] >= 1
    # following it (delta and s holding) settles the verdict, one run fewer does not
    assert arms.with_runs(a["runs_needed"], 0).settles(a["delta"])
    assert not arms.with_runs(a["runs_needed"] - 1, 0).settles(a["delta"])
    assert a["minutes_needed"] == pytest.approx(43.0 * a["runs_needed"])
    assert a["fits"] == (43.0 * a["runs_needed"] <= 300.0)
    # a loser: the runs that would settle `worse`
    assert b["runs_needed"] is None and b["runs_needed_worse"] == stats.rule_runs_needed(
        b["delta"], stats.Arms(nz["s"], 1, 5, nz["nu"], nz["nu_local"], 2, 5, 1.0, True)).extra
    assert b["runs_needed_worse"] >= 1 and "(worse)" in render(r)
    out = render(r)
    assert "min" in out and "Design" not in out


def test_settled_verdict_has_no_runs_needed():
    runs = [rec("baseline", i, y) for i, y in enumerate((54.0, 54.5, 53.8))]
    runs += [rec("a", 10 + i, y) for i, y in enumerate((61.0, 60.5, 61.5))]  # 4 repeat dof, look 6
    r = build_report(runs, baseline="baseline", reference=REF)
    a = by_name(r, "a")
    assert a["verdict"] == "better" and a["runs_needed"] is None and not a["needs_baseline_runs"]
    assert "settled" in render(r)


def test_needs_baseline_runs_when_candidate_runs_cannot_settle_it():
    # Against the reference the SE has a floor (s^2/5 + offset^2): candidate runs alone never get
    # +2.5 points there; local baseline runs remove it.
    runs = [rec("a", 2, 56.0), rec("a", 3, 57.0), rec("a", 4, 56.5), rec("b", 5, 50.0), rec("b", 6, 51.0),
            rec("b", 7, 50.0)]
    r = build_report(runs, baseline="baseline", reference=Reference(54.0, 1.48, 5))
    a = by_name(r, "a")
    assert a["runs_needed"] is None and a["needs_baseline_runs"] is True
    assert isinstance(a["runs_needed_both_arms"], int) and a["runs_needed_both_arms"] > 0
    dumps(r)
    assert "baseline too" in render(r)


def test_noise_and_family_are_the_whole_store_whatever_is_shown():
    # `compare cosine` hand-picks one candidate, but the noise pools every
    # variant and the verdicts correct over every candidate tried (m = 3, not 1)
    r = build_report(RUNS, baseline="baseline", reference=REF, variants=["cosine", "ghost"])
    full = build_report(RUNS, baseline="baseline", reference=REF)
    assert r["alpha_spending"]["m"] == 3 and r["alpha_spending"]["family"] == ["cosine", "left-pad", "token-clip"]
    assert r["noise"] == full["noise"]  # token-clip's scatter counts although it is not shown
    assert [e["name"] for e in r["variants"]] == ["cosine", "ghost"]
    assert by_name(r, "ghost")["n"] == 0 and by_name(r, "ghost")["note"] == "no runs"
    assert "no runs" in render(r)
    # a declared family: the shown candidates always count
    r = build_report(RUNS, baseline="baseline", reference=REF, variants=["cosine"], family=["left-pad"])
    assert r["alpha_spending"]["family"] == ["cosine", "left-pad"] and r["alpha_spending"]["m"] == 2


def test_one_candidate_per_key_in_the_family():
    # a candidate is a run's key (opsdctl.stats.candidates): a variant with another's knobs on the
    # same code carries that candidate's label and is not one more member of the family
    runs = [RunRecord(v, i, y, 12, 30, None, None, False, candidate=c) for i, (v, y, c) in enumerate([
        ("baseline", 54.0, "baseline"), ("baseline", 55.0, "baseline"), ("a", 56.0, "a"), ("a-again", 56.5, "a"),
        ("b", 53.0, "b"), ("baseline-copy", 54.5, "baseline"), ("a", 57.0, "a @3f2a1c")])]
    r = build_report(runs, baseline="baseline", reference=REF)
    assert r["alpha_spending"]["m"] == 3 and r["alpha_spending"]["family"] == ["a", "a @3f2a1c", "b"]
    assert by_name(r, "a")["variants"] == ["a", "a-again"] and r["baseline"]["n"] == 3
    # a declared family by variant name takes every candidate of that variant
    r = build_report(runs, baseline="baseline", reference=REF, variants=["b"], family=["a"])
    assert r["alpha_spending"]["family"] == ["a", "a @3f2a1c", "b"]


def test_partial_runs_alone_never_settle_anything():
    # a store with only partial runs (15 problems x 4) of a loser-looking variant
    ids = [f"p{i}" for i in range(15)]
    runs = [counted("baseline", i, [2] * 15, k=4, ids=ids, partial=True) for i in range(3)]
    runs += [counted("a", 10 + i, [1] * 15, k=4, ids=ids, partial=True) for i in range(3)]
    r = build_report(runs, baseline="baseline", reference=REF, chain_minutes=43.0, minutes_left=300.0)
    assert [e["verdict"] for e in r["variants"]] == [None, None]
    assert all(e["partial"] and e["label"] == "partial: screening only" for e in r["variants"])
    a = by_name(r, "a", partial=True)
    v = stats.eval_variance([1] * 15, 4)
    s2 = r["noise"]["s"] ** 2  # the prior alone: no full run, no split
    assert a["se_eval"] == pytest.approx(math.sqrt(v / 3)) and a["se"] == pytest.approx(math.sqrt((s2 + v) / 3))
    out = render(r, width=250)
    verdicts = [l for l in out.splitlines() if l.startswith(("a ", "│ a "))]  # its rows, in any table
    assert "settled" not in out and not any(" worse " in l or " better " in l for l in verdicts)
    assert out.count("partial: screening only") >= 2


def test_no_baseline_at_all():
    r = build_report(RUNS, baseline="nope", reference=None)
    dumps(r)
    assert r["baseline"]["source"] is None and r["alpha_spending"]["m"] == 0
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
    order = [next(i for i, l in enumerate(lines) if l.startswith(f"{name} ")) for name in
             ("baseline", "token-clip", "cosine", "left-pad")]
    assert order == sorted(order)
    assert "Bonferroni over the m = 3" in out and "Noise: s =" in out and "nan" not in out.lower()


def test_names_with_brackets_are_printed_verbatim():
    runs = [rec("base[v1]", 1, 54.0), rec("base[v1]", 2, 55.0), rec("clip[bold]", 3, 57.0)]
    out = render(build_report(runs, baseline="base[v1]", reference=REF))
    assert "base[v1] (baseline)" in out and "clip[bold]" in out


def test_a_screen_is_read_against_the_baselines_partial_on_the_same_problems():
    from opsdctl.stats.screen import SCREEN_Z, screen_reading, screen_se

    rng = np.random.default_rng(4)
    full = [counted(v, i, rng.integers(0, 13, 30)) for i, v in enumerate(["baseline"] * 3 + ["a"] * 2, start=1)]
    ids = [f"q{i}" for i in range(15)]
    scr = [counted("b", 10, rng.integers(0, 5, 15), k=4, ids=ids), counted("b", 11, rng.integers(0, 5, 15), k=4, ids=ids),
           counted("baseline", 12, rng.integers(0, 5, 15), k=4, ids=ids)]
    other = counted("c", 13, rng.integers(0, 5, 15), k=4, ids=[f"z{i}" for i in range(15)])
    r = build_report(full + scr + [other], baseline="baseline", reference=REF)
    b, bp = by_name(r, "b", partial=True), by_name(r, "baseline", partial=True)
    vb = b["vs_baseline"]
    assert vb["baseline_runs"] == 1 and vb["delta"] == pytest.approx(b["mean"] - bp["mean"])
    assert vb["se"] == pytest.approx(math.hypot(b["se"], bp["se"]))
    assert vb["p_effect"] == pytest.approx(screen_reading(vb["delta"], vb["se"]).p_effect)
    # other problems: nothing to read it against
    c = by_name(r, "c", partial=True)
    assert c["vs_baseline"] is None and "no baseline partial on these problems" in c["note"]
    nz = r["noise"]
    want = screen_se(nz["tau2"], nz["v_eval"], 60 / 360)
    assert r["screen"] == {"problems": 15, "k": 4, "se": pytest.approx(want), "resolves": pytest.approx(SCREEN_Z * want)}
    assert "screen read against the baseline's partial" in render(r) and "P(effect > 0)" in render(r, width=250)


def test_screen_reading_is_the_posterior_under_the_family_prior():
    from opsdctl.stats.screen import screen_reading

    rng = np.random.default_rng(9)
    eff = rng.normal(0.0, 2.0, 2_000_000)
    obs = eff + rng.normal(0.0, 3.0, eff.size)
    near = np.abs(obs - 1.5) < 0.02
    got = screen_reading(1.5, 3.0).p_effect
    assert got == pytest.approx(np.mean(eff[near] > 0), abs=0.02)
    assert screen_reading(-1.0, 3.0).p_effect < 0.5 < screen_reading(1.0, 3.0).p_effect


def test_compare_says_when_the_arms_moved_the_forecasts_noise():
    from opsdctl.cli.compare_table import FORECAST_SD_MOVED

    # six ideas seen once, all within a point of the baseline: under the family they say the noise
    # is smaller than s, and the forecast's noise moves off the verdicts' s (by 10% at the arms'
    # power 1/4)
    close = [rec("baseline", 1, 54.0), rec("baseline", 2, 55.0)] + [
        rec(f"idea{i}", 10 + i, y) for i, y in enumerate((54.0, 54.2, 54.4, 54.6, 54.8, 55.0))]
    for runs, shown in ((close, True), (close[:4], None)):
        r = build_report(runs, baseline="baseline", reference=REF)
        fm, s = r["forecast_model"], r["noise"]["s"]
        sd = math.sqrt(fm["train_var"] + fm["eval_var"])
        moved = abs(sd / s - 1.0) >= FORECAST_SD_MOVED
        assert shown is None or moved == shown
        out = " ".join(render(r, width=250).split())
        assert (f"The forecast's run-to-run sd is {sd:.2f}, not s = {s:.2f}" in out) == moved
