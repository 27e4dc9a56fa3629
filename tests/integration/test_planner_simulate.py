"""`opsdctl simulate` through the CLI, and benchmarks/gpu_gate_check.py --fake."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def test_cli(ws, tmp_path):
    out = ws.cli("simulate", "-n", "2", "--out", str(tmp_path / "r")).stdout
    assert "| policy |" in out and (tmp_path / "r" / "simulate.md").exists()
    doc = ws.cli_json("simulate", "-n", "1", "--effects", "0,3")
    assert doc["setup"]["effects"] == [0.0, 3.0]


def test_cli_gpu_slots(ws):
    doc = ws.cli_json("simulate", "-n", "1", "--gpus-per-chain", "1")
    assert doc["setup"]["gpus_per_chain"] == 1 and doc["setup"]["layout_factors"]["measured"] is True
    pol = doc["policies"]
    assert pol["planner fifo"]["chains_scored"]["mean"] > pol["fifo-by-hand x2"]["chains_scored"]["mean"]
    bad = ws.cli("simulate", "--gpus-per-chain", "3", check=False)
    assert bad.returncode == 2 and "slots of 1, 2 or 4" in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_gpu_gate_check_fake_mode(tmp_path):
    out = tmp_path / "gate.json"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_gate_check.py"), "--fake", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    assert doc["ok"] and doc["mode"] == "fake" and all(doc["checks"].values())
    assert doc["foreign"]["pid_seen_by_nvml"] and str(doc["foreign"]["pid"]) in doc["reported"]["activity"]
