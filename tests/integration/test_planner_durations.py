"""Duration estimates end to end: recorded on each stage row, `opsdctl durations --json`, and
compare's "does it fit" using them."""

from __future__ import annotations

import pytest

from opsdctl.plan.durations import FEW_FACTOR


def test_estimates_recorded_and_reported(ws):
    """Two chains through the real worker: each stage row carries the estimate admission used
    (the profile default first, then history), durations --json reports estimate vs actual, and
    compare's minutes per chain come from the same estimator."""
    text = (ws.root / "opsdctl.toml").read_text()
    ws.write_config(text + "\n[planner]\ntrain_minutes = 0.5\neval_minutes = 0.75\n")
    ws.cli("queue", "baseline", "-n", "2")
    ws.run("worker", "--drain")
    rows = ws.sql("select chain_id, name, estimate_seconds, seconds from stage order by id")
    assert [(r[0], r[1]) for r in rows] == [(1, "train"), (1, "eval"), (2, "train"), (2, "eval")]
    assert rows[0][2] == 30.0 and rows[1][2] == 45.0  # no history yet: [planner] defaults
    assert rows[2][2] == pytest.approx(round(rows[0][3] * FEW_FACTOR, 1), abs=0.11)  # one train seen
    assert rows[3][2] == pytest.approx(round(rows[1][3] * FEW_FACTOR, 1), abs=0.11)
    doc = ws.cli_json("durations")
    assert doc["defaults_s"] == {"train": 30.0, "eval": 45.0}
    keys = {e["cost_key"]: e for e in doc["estimates"]}
    assert set(keys) == {"train|tiny|mcl=1024", "eval|tiny"}
    assert all(e["n"] == 2 and e["source"] == "history" for e in keys.values())
    assert doc["accuracy"]["stages_with_estimate"] == 4
    assert doc["accuracy"]["over_estimate"] == sum(1 for r in rows if r[3] > r[2])
    assert [r["chain_id"] for r in doc["recent"]] == [1, 1, 2, 2] and doc["recent"][0]["error_s"] < 0
    assert "stage duration estimates" in ws.cli("durations").stdout
    status = ws.status()
    done = {c["chain_id"]: c for c in status["chains"]}
    assert done[2]["stages"][0]["estimate_seconds"] == rows[2][2]
    # compare: chain minutes = the history-based high estimate, not a profile constant
    tr = max(r[3] for r in rows if r[1] == "train") * FEW_FACTOR
    ev = max(r[3] for r in rows if r[1] == "eval") * FEW_FACTOR
    comp = ws.cli_json("compare")
    assert comp["budget"]["chain_minutes"] == pytest.approx((tr + ev) / 60.0, rel=1e-6)
