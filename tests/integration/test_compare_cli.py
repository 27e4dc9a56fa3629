"""`opsdctl compare` and `opsdctl show` over a real store filled by real (emulated) stages."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def scored(ws):
    ws.cli("queue", "baseline", "token-clip", "cosine", "--repeats", "2", "--seed", "3")
    ws.run("worker", "--drain")
    return ws


def test_compare_json_ranks_candidates_against_the_baseline(scored, tmp_path):
    png = tmp_path / "cmp.png"
    report = scored.cli_json("compare", "--plot", str(png))
    assert set(report) >= {"baseline", "noise", "variants"}
    assert report["baseline"]["name"] == "baseline" and report["baseline"]["source"] == "runs"
    assert report["baseline"]["n"] == 2
    names = [v["name"] for v in report["variants"]]
    assert sorted(names) == ["cosine", "token-clip"]
    for v in report["variants"]:
        assert {"name", "n", "mean", "sd", "se", "delta", "ci_low", "ci_high", "p_beat", "verdict",
                "runs_needed", "partial"} <= set(v)
        assert v["n"] == 2 and v["verdict"] in ("better", "worse", "undecided")
    ps = [v["p_beat"] for v in report["variants"]]
    assert ps == sorted(ps, reverse=True)
    # scores in the report are the scores in the store
    rows = scored.sql("select avg_at_k from score join chain on chain.id = score.chain_id "
                      "join variant on variant.id = chain.variant_id where variant.name = 'token-clip'")
    tc = next(v for v in report["variants"] if v["name"] == "token-clip")
    assert tc["mean"] == pytest.approx(sum(r[0] for r in rows) / len(rows))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_subset_keeps_the_baseline_and_renders(scored):
    report = scored.cli_json("compare", "cosine")
    assert [v["name"] for v in report["variants"]] == ["cosine"]
    assert report["baseline"]["n"] == 2
    text = scored.cli("compare", "--explain").stdout
    assert "baseline" in text and "token-clip" in text and "Bonferroni" in text


def test_compare_with_reference_only(ws):
    ws.write_config(extra="")
    cfg = (ws.root / "opsdctl.toml").read_text().replace(
        '[baseline]\nvariant = "baseline"', '[baseline]\nvariant = "baseline"\nreference = { mean = 54.22, sd = 1.48, n = 5 }')
    (ws.root / "opsdctl.toml").write_text(cfg)
    ws.cli("queue", "token-clip")
    ws.run("worker", "--drain")
    report = ws.cli_json("compare")
    assert report["baseline"]["source"] == "reference" and report["baseline"]["mean"] == 54.22
    assert report["noise"]["nu"] == 4  # the prior alone: n - 1


def test_show_lists_runs_with_per_problem_counts(scored):
    doc = scored.cli_json("show", "token-clip")
    assert doc["variant"] == "token-clip" and doc["method"]["clip_mode"] == "token"
    assert len(doc["runs"]) == 2
    run = doc["runs"][0]
    assert run["state"] == "succeeded" and len(run["problems"]) == 6
    assert run["train"]["final_loss"] is not None
    text = scored.cli("show", "token-clip").stdout
    assert "per-problem correct" in text and "clip_mode=token" in text


def test_show_unknown_variant_is_one_line(scored):
    out = scored.cli("show", "nope", check=False)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "nope" in out.stderr


def test_compare_unknown_baseline_is_refused_in_one_line(scored):
    # it used to fall back to the published reference without a word
    out = scored.cli("compare", "--baseline", "basline", check=False)
    assert out.returncode == 2
    err = out.stderr.strip()
    assert len(err.splitlines()) == 1 and "--baseline basline" in err and "not in the store" in err
    assert out.stdout == ""
    assert scored.cli_json("compare", "--baseline", "cosine")["baseline"]["name"] == "cosine"


def test_compare_one_variant_corrects_over_the_whole_store(scored):
    # `compare cosine` still counts token-clip in the family and the noise
    alone = scored.cli_json("compare", "cosine")
    every = scored.cli_json("compare")
    assert alone["alpha_spending"]["m"] == every["alpha_spending"]["m"] == 2
    assert alone["alpha_spending"]["family"] == ["cosine", "token-clip"]
    assert alone["noise"]["nu"] == every["noise"]["nu"] and alone["noise"]["s"] == every["noise"]["s"]
    # a declared family narrows it (the shown ones always count)
    fam = scored.cli_json("compare", "cosine", "--family", "cosine")
    assert fam["alpha_spending"]["m"] == 1 and fam["alpha_spending"]["family"] == ["cosine"]
    since = scored.cli_json("compare", "--family", "since:2999-01-01")
    assert since["alpha_spending"]["family"] == ["cosine", "token-clip"]  # nothing queued since: the shown ones
    bad = scored.cli("compare", "--family", "since:yesterday", check=False)
    assert bad.returncode == 2 and "since:yesterday" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    unknown = scored.cli("compare", "--family", "cosine,nope", check=False)
    assert unknown.returncode == 2 and "nope" in unknown.stderr


def test_compare_family_from_the_config(scored):
    cfg = scored.root / "opsdctl.toml"
    cfg.write_text(cfg.read_text() + '\n[compare]\nfamily = ["token-clip"]\n')
    doc = scored.cli_json("compare", "cosine")
    assert doc["alpha_spending"]["family"] == ["cosine", "token-clip"] and doc["alpha_spending"]["m"] == 2
    cfg.write_text(cfg.read_text().replace('family = ["token-clip"]', 'family = "sometimes"'))
    bad = scored.cli("compare", check=False)
    assert bad.returncode == 2 and "[compare] family" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_compare_leads_with_the_answer_and_fits_100_columns(scored):
    """At COLUMNS=100: the first line is what to submit (the pick `export-recipe --leader` makes),
    the second what to run next (the top of `advise`), then a table whose rows and headers are
    whole; the statistics notes only with --explain, and whole in --json."""
    doc = scored.cli_json("compare")
    out = scored.run("compare", env={"COLUMNS": "100"}).stdout
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines), [line for line in lines if len(line) > 100]
    lead, top = doc["submit"], doc["run_next"]
    named = lead["leader"] if lead["variant"] else f"the released recipe ({lead['leader']})"
    assert lines[0].startswith(f"Submit now: {named}, forecast {lead['forecast']['mean']:.2f} ")
    assert lines[1].startswith(f"Run next: {top['text']}") and top == doc["advice"][0]
    header = next(line for line in lines if line.startswith("candidate "))
    assert header.split() == ["candidate", "runs", "mean", "delta", "[95%", "CI]", "P(beat)", "verdict", "forecast",
                              "[80%]", "to", "settle"]
    rows = lines[lines.index(header) + 2:]
    for name in ["baseline"] + [v["name"] for v in doc["variants"]]:
        assert sum(line.startswith(f"{name} ") for line in rows) == 1  # one whole line each, never cut
    assert "…" not in out and "Noise:" not in out and "Verdicts:" not in out
    explained = scored.run("compare", "--explain", env={"COLUMNS": "100"}).stdout
    assert explained.startswith(out.splitlines()[0]) and "Noise: s =" in explained and "Bonferroni" in explained
    assert {"noise", "alpha_spending", "forecast_model", "notes"} <= set(doc)
    # the pick is the submission rule's on the report (every candidate here has a recipe)
    from opsdctl.plan.submission import pick_leader
    from tests.support.report_doc import report as typed

    assert pick_leader(typed(doc)).name == lead["leader"]
