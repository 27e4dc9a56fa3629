"""Partial evaluations as first-class chains: `queue --partial PROBLEMSxK` reaches
the eval stage through {num_problems} / {k}, NUM_PROBLEMS / VAL_N and our evaluator's flags; the
runs are flagged partial in status, show, variants and compare and never get a verdict on their
own. Real subprocess stages, a real SQLite store."""

from __future__ import annotations

import sys

import pytest
from conftest import FAKE_EVAL

PY = sys.executable
REFERENCE = '[baseline]\nvariant = "baseline"\nreference = { mean = 54.22, sd = 1.48, n = 5 }'


def _with_reference(ws) -> None:
    cfg = (ws.root / "opsdctl.toml").read_text().replace('[baseline]\nvariant = "baseline"', REFERENCE)
    (ws.root / "opsdctl.toml").write_text(cfg)


def test_partial_reaches_the_eval_through_env_and_is_flagged_everywhere(ws):
    # a user's dev_eval.sh: honours NUM_PROBLEMS / VAL_N, prints only the FINAL line (nothing says "partial")
    ws.write_config(eval=f"{PY} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}} --final-only")
    ws.cli("queue", "baseline", "--repeats", "2")
    queued = ws.cli_json("queue", "token-clip", "--partial", "3x2", "--repeats", "2")
    assert [q["partial"] for q in queued] == [{"num_problems": 3, "k": 2}] * 2
    # queued chains are flagged before they run
    before = ws.chains()
    assert [before[i]["partial"] for i in (1, 2, 3, 4)] == [False, False, True, True]
    assert before[3]["eval"] == {"num_problems": 3, "k": 2} and before[1]["eval"] is None
    assert "partial 3x2" in ws.cli("status").stdout

    # a VAL_N left in the worker's shell must not turn the full chains partial
    ws.run("worker", "--drain", env={"VAL_N": "1", "NUM_PROBLEMS": "2"})
    log = (ws.runs / "3" / "eval.log").read_text()
    assert "NUM_PROBLEMS=3 VAL_N=2" in log and "on 3 problems" in log
    assert "NUM_PROBLEMS" not in (ws.runs / "1" / "eval.log").read_text()
    chains = ws.chains()
    assert all(chains[i]["state"] == "succeeded" for i in (1, 2, 3, 4))
    assert [(chains[i]["k"], chains[i]["n_problems"], chains[i]["partial"]) for i in (1, 3)] == [(4, 6, False), (2, 3, True)]

    show = ws.cli_json("show", "token-clip")
    assert [r["partial"] for r in show["runs"]] == [True, True]
    assert show["runs"][0]["eval"] == {"num_problems": 3, "k": 2} and show["runs"][0]["n_problems"] == 3
    assert "partial" in ws.cli("show", "token-clip").stdout

    # variants: full scores and partial ones apart, marked in the table
    rows = {r["variant"]: r for r in ws.cli_json("variants")}
    assert rows["token-clip"]["scores"] == [] and len(rows["token-clip"]["partial_scores"]) == 2
    assert rows["token-clip"]["partial_scores"][0] | {"score": 0} == {"chain_id": 3, "score": 0, "n_problems": 3, "k": 2}
    assert len(rows["baseline"]["scores"]) == 2 and rows["baseline"]["partial_scores"] == []
    assert "(partial 3x2)" in ws.cli("variants").stdout

    # compare: the partial runs are a screening entry of their own, with no verdict
    report = ws.cli_json("compare")
    (tc,) = [e for e in report["variants"] if e["name"] == "token-clip"]
    assert tc["partial"] is True and tc["verdict"] is None and (tc["n_problems"], tc["k"]) == (3, 2)

    # durations: the partial eval has its own cost key, apart from the full one
    keys = {e["cost_key"]: e for e in ws.cli_json("durations")["estimates"]}
    assert {"eval|tiny", "eval|tiny|partial=3x2"} <= set(keys)
    assert keys["eval|tiny"]["n"] == 2 and keys["eval|tiny|partial=3x2"]["n"] == 2


def test_a_store_of_only_partial_runs_never_settles(ws):
    """The old bug: FINAL-line partial runs alone were judged as if full (`worse ... settled`)."""
    _with_reference(ws)
    ws.write_config(text=(ws.root / "opsdctl.toml").read_text().replace(
        f"{FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}",
        f"{FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}} --final-only"))
    ws.cli("queue", "baseline", "token-clip", "--partial", "4x2", "--repeats", "3")
    ws.run("worker", "--drain")
    report = ws.cli_json("compare")
    entries = [e for e in report["variants"] if e.get("n")]
    assert {e["name"] for e in entries} == {"baseline", "token-clip"}
    assert all(e["partial"] and e["verdict"] is None for e in entries), entries
    assert report["baseline"]["source"] == "reference"


def test_our_evaluator_placeholders_and_the_script_that_ignores_the_request(ws):
    # {num_problems} {k} in the template (as the starter's `python -m eval ... --num-problems {num_problems} --k {k}`)
    ws.write_config(eval=f"{PY} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}} "
                         f"--num-problems {{num_problems}} --k {{k}}")
    ws.cli("queue", "baseline")
    ws.cli("queue", "baseline", "--partial", "5x3")
    out = ws.run("worker", "--drain", env={"FAKE_PROBLEMS": "30"})
    chains = ws.chains()
    # a full chain gets the profile's full protocol (tiny: 30 problems x 4)
    assert (chains[1]["n_problems"], chains[1]["k"], chains[1]["partial"]) == (30, 4, False)
    assert (chains[2]["n_problems"], chains[2]["k"], chains[2]["partial"]) == (5, 3, True)
    assert "asked for a partial eval" not in out.stdout

    # a script that cannot run partial evals: the run stays partial (screening) and the worker says why
    ws.write_config(eval=f"{PY} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}")
    ws.cli("queue", "baseline", "--partial", "5x3")
    out = ws.run("worker", "--drain", env={"FAKE_IGNORE_PARTIAL": "1"})
    assert "asked for a partial eval of 5 problems x 3 samples but the eval reported 6 x 4" in " ".join(out.stdout.split())
    assert ws.chains()[3]["partial"] is True


@pytest.mark.parametrize("spec, words", [
    ("15", "write PROBLEMSxSAMPLES"), ("0x4", "at least 1"), ("40x4", "has 30 problems"),
    ("15x8", "samples 4 per problem"), ("30x4", "that is the full evaluation"),
])
def test_bad_partial_is_one_line_and_writes_nothing(ws, spec, words):
    proc = ws.cli("queue", "baseline", "--partial", spec, check=False)
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not ws.db.exists() or ws.sql("select count(*) from chain") == [(0,)]


def test_partial_placeholders_only_in_the_eval_stage(ws):
    ws.write_config(train=f"{PY} -c pass --n {{num_problems}}")
    proc = ws.cli("queue", "baseline", check=False)
    assert proc.returncode == 2 and "{num_problems} is only known in the eval stage" in proc.stderr
