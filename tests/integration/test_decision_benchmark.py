"""benchmarks/decision.py, small: five sessions through the worker loop make a document of the
committed shape."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def test_five_sessions_make_the_document(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision.py"), "--sessions", "5", "--processes", "1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "decision.json").read_text())
    s = doc["summary"]
    assert s["sessions"] == 5 and set(s["rules"]) == {"P(beat)", "local mean", "forecast", "oracle"}
    for r in s["rules"].values():
        assert {"gain_mean", "gain_p5", "regret_mean", "p_worse_1", "baseline_picked"} <= set(r)
        assert r["regret_mean"] >= 0.0 and 0.0 <= r["p_worse_1"] <= 1.0
    assert [d["decile"] for d in s["calibration"]][::9] == ["0.0-0.1", "0.9-1.0"]
    assert sum(d["n"] for d in s["calibration"]) > 0 and 0.0 <= s["coverage80_all_arms"] <= 1.0
    assert len(s["by_condition"]) == 5  # six conditions take turns: five sessions reach five of them
    md = (tmp_path / "decision.md").read_text()
    assert "| forecast |" in md and "Calibration of p_above_reference" in md


def test_the_right_prior_diagnostic_writes_its_own_files(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decision.py"), "--sessions", "2", "--processes", "1",
                          "--right-prior", "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decision_right_prior.json", "decision_right_prior.md"]
    doc = json.loads((tmp_path / "decision_right_prior.json").read_text())
    assert doc["right_prior"] is True and doc["command"].endswith("--right-prior")
    assert "the right prior" in (tmp_path / "decision_right_prior.md").read_text()
