"""benchmarks/decision.py, small: five sessions through the worker loop make a document of the
committed shape."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO


def test_five_sessions_make_the_document(tmp_path):
    # the replaced pipeline first (commit 90d2cd5's policy from git archive), on the same sessions;
    # a shallow clone lacks that commit (the next test covers what the script says then)
    history = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "90d2cd5^{commit}"], capture_output=True).returncode == 0
    if history:
        today = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision_today.py"), "--sessions", "5",
                                "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
        assert today.returncode == 0, today.stderr
        old = json.loads((tmp_path / "decision_today.json").read_text())
        assert old["sessions"] == 5
        assert old["rules"]["P(beat)"]["regret_queued_mean"] >= old["rules"]["P(beat)"]["regret_mean"]
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision.py"), "--sessions", "5", "--processes", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "decision.json").read_text())
    s = doc["summary"]
    assert s["sessions"] == 5 and set(s["rules"]) == {"P(beat)", "local mean", "forecast", "oracle"}
    for r in s["rules"].values():
        assert {"gain_mean", "gain_p5", "regret_mean", "p_worse_1", "baseline_picked"} <= set(r)
        assert r["regret_queued_mean"] >= r["regret_mean"] >= 0.0 and 0.0 <= r["p_worse_1"] <= 1.0
    assert [d["decile"] for d in s["calibration"]][::9] == ["0.0-0.1", "0.9-1.0"]
    assert sum(d["n"] for d in s["calibration"]) > 0 and 0.0 <= s["coverage80_all_arms"] <= 1.0
    assert len(s["by_condition"]) == 5  # six conditions take turns: five sessions reach five of them
    md = (tmp_path / "decision.md").read_text()
    assert "| forecast |" in md and "Calibration of p_above_reference" in md
    assert ("today" in doc and "Against the pipeline it replaces" in md) is history


def test_the_replaced_pipeline_says_when_its_commit_is_missing(tmp_path):
    # a copy outside any git history stands for a shallow clone: one line, exit 2, nothing written
    bench = tmp_path / "repo" / "benchmarks"
    bench.mkdir(parents=True)
    for name in ("decision_today.py", "decision.py", "results_file.py"):
        shutil.copy(REPO / "benchmarks" / name, bench / name)
    out = subprocess.run([sys.executable, str(bench / "decision_today.py"), "--sessions", "2", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "90d2cd5" in out.stderr and "git fetch --unshallow" in out.stderr
    assert not (tmp_path / "out").exists()


def test_a_replaced_pipeline_of_other_sessions_is_not_set_beside(tmp_path):
    (tmp_path / "decision_today.json").write_text(json.dumps({"sessions": 1000, "seed": 0, "rules": {
        "P(beat)": {"gain_mean": 0.8, "regret_queued_mean": 1.0}}}))
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision.py"), "--sessions", "2", "--processes", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "today" not in json.loads((tmp_path / "decision.json").read_text())
    assert "Against the pipeline" not in (tmp_path / "decision.md").read_text()


def test_the_right_prior_diagnostic_writes_its_own_files(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision.py"), "--sessions", "2", "--processes", "1",
                          "--right-prior", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decision_right_prior.json", "decision_right_prior.md"]
    doc = json.loads((tmp_path / "decision_right_prior.json").read_text())
    assert doc["right_prior"] is True and doc["command"].endswith("--right-prior")
    assert "the right prior" in (tmp_path / "decision_right_prior.md").read_text()


def test_several_seeds_pool_their_sessions_in_their_own_files(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision.py"), "--sessions", "2", "--processes", "1",
                          "--seed", "0", "1", "--out", str(tmp_path), "--rows", str(tmp_path / "rows.jsonl")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decision_seeds_0_1.json", "decision_seeds_0_1.md", "rows.jsonl"]
    doc = json.loads((tmp_path / "decision_seeds_0_1.json").read_text())
    assert doc["seed"] == [0, 1] and doc["summary"]["sessions"] == 4 and doc["command"].endswith("--seed 0 1")
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["i"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert rows[0]["effects"] != rows[2]["effects"]  # the second seed draws other sessions
    assert "4 simulated 6-hour sessions" in (tmp_path / "decision_seeds_0_1.md").read_text()


def test_the_rows_feed_the_calibration_study(tmp_path):
    rows = tmp_path / "rows.jsonl"
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision.py"), "--sessions", "3", "--processes", "1",
                          "--out", str(tmp_path), "--rows", str(rows)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first = json.loads(rows.read_text().splitlines()[0])
    assert "level" in first and all("runs" in a and "p_above_bayes" in a for a in first["arms"])
    # the inputs a row keeps build compare's forecast again, exactly as the session printed it
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import calibration_shapes
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    again, (sd, regret) = calibration_shapes.forecast_again(first, False, False)
    assert [round(x["p_above"], 9) for x in again] == [round(a["p_above"], 9) for a in first["arms"]]
    # and picks what the session submitted (the leader rule on the same forecast)
    assert sd == first["sigma"] and regret == pytest.approx(first["regret"]["forecast"])
    assert calibration_shapes.forecast_again(first, True, True)[0] != again
    cut, _ = calibration_shapes.forecast_again(first, False, False, power=0.0)
    assert len(cut) == len(again)
    doc = json.loads((tmp_path / "decision.json").read_text())["summary"]
    assert {"median", "p90", "p_over_goal", "redraws"} <= set(doc["calibration_floor"])
    assert len(doc["calibration_bayes"]) == 10
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "calibration_shapes.py"), str(rows),
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    shapes = json.loads((tmp_path / "calibration_shapes.json").read_text())
    assert shapes["sessions"] == 3 and len(shapes["families"]) == 14
    assert set(shapes["families"]["one normal, published sd"]) == {"all", "sd 1.48", "sd 2.5"}
    fam = shapes["families"]
    assert fam["one normal, published sd"]["all"]["regret"] is None  # an exact posterior picks nothing
    # the forecast built again unchanged picks what the sessions submitted
    assert fam["the forecast again, nothing changed"]["all"]["regret"] == pytest.approx(
        fam["the forecast (compare's p_above_reference)"]["all"]["regret"])
    # rows from before the inputs were kept: the rebuilt rows are left out, and it says so
    old = tmp_path / "old_rows.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "inputs"}) + "\n"
                           for line in rows.read_text().splitlines()))
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "calibration_shapes.py"), str(old),
                          "--out", str(tmp_path / "old")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "left out" in out.stderr, out.stderr
    assert len(json.loads((tmp_path / "old" / "calibration_shapes.json").read_text())["families"]) == 8


def test_the_calibration_study_refuses_rows_it_cannot_use(tmp_path):
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"i": 0, "arms": [{"name": "baseline"}]}\n')
    for arg in (str(bad), str(tmp_path / "missing.jsonl")):
        out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "calibration_shapes.py"), arg, "--out",
                              str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
        assert "decision.py --rows" in out.stderr
    assert not (tmp_path / "out").exists()
