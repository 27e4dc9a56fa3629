"""benchmarks/worlds.py, small: a few sessions of two worlds in every layout make a document of the
committed shape, and the goals' arithmetic says what it should."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from support.bench_import import bench_module


@pytest.fixture(scope="module")
def worlds():
    return bench_module("worlds")


def test_a_tiny_suite_makes_the_document(tmp_path, worlds):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "worlds.py"), "--split", "tune", "--sessions", "3",
                          "--adaptive", "1", "--worlds", "2", "3", "--processes", "1", "--sweep", "--out", str(tmp_path),
                          "--rows", str(tmp_path / "rows.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "worlds_tune.json").read_text())
    assert doc["split"] == "tune" and doc["seed"] == worlds.SEEDS["tune"] != worlds.SEEDS["held-out"]
    names = [worlds.WORLDS[2].name, worlds.WORLDS[3].name]
    assert list(doc["results"]) == [f"{w} | {lay}" for w in names for lay in worlds.LAYOUTS]
    for key, f in doc["results"].items():
        assert f["sessions"] == (1 if key.endswith("adaptive") else 3)
        assert set(f["goals"]) == {"gain", "p_worse_1", "cover_arms", "cover_submitted"}
        assert f["baseline"]["gain"] == 0.0 and f["baseline"]["p_worse_1"] == 0.0  # submitting the baseline: 0
        assert 0.0 <= f["cover_arms"] <= 1.0
    assert len(doc["sweep"]) == 2 + sum(len(t) for _, t in worlds.SWEEP.values()) + len(worlds.NORMAL_SWEEP)
    md = (tmp_path / "worlds_tune.md").read_text()
    assert "| mostly harmful N(-1.5, 1) | 0+4x2 | 3 |" in md and "Threshold sweep" in md
    # the same sessions' rows: the family's intervals beside the forecast's
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "family_intervals.py"), "--rows",
                          str(tmp_path / "rows.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("| mostly harmful N(-1.5, 1) |") == 4 and "of 8 cells" in out.stdout


def test_the_goals(worlds):
    def fig(bet, local, worse, arms, sub):
        return {"bet": {"gain": bet, "p_worse_1": worse}, "local mean": {"gain": local}, "cover_arms": arms,
                "cover_submitted": sub}

    assert all(worlds.goals(fig(0.5, 0.6, 0.05, 0.80, 0.70)).values())  # within 0.15 of the local mean
    g = worlds.goals(fig(0.4, 0.6, 0.051, 0.91, 0.69))
    assert g == {"gain": False, "p_worse_1": False, "cover_arms": False, "cover_submitted": False}
    assert worlds.goals(fig(-0.1, -0.5, 0.0, 0.72, None))["gain"] is True  # the bar is max(local, 0) - 0.15
    assert worlds.goals(fig(-0.2, -0.5, 0.0, 0.72, None))["gain"] is False
    # with the paired difference a shortfall is a miss only beyond 2 standard errors
    rows = [{"gain": {"local mean": v}} for v in (1.0, 0.0, 2.0, 1.0)]
    p = worlds.paired(rows, [0.5, 0.0, 2.0, 0.3])  # differences -0.5, 0, 0, -0.7
    d = np.array([-0.5, 0.0, 0.0, -0.7])
    se = d.std(ddof=1) / 2.0
    assert p["against"] == "local mean" and p["diff"] == pytest.approx(d.mean(), abs=1e-4)
    assert p["se"] == pytest.approx(se, abs=1e-4) and p["ok"] is bool(d.mean() + 2 * se >= -0.15)
    assert worlds.goals({**fig(0.3, 0.6, 0.0, 0.8, None), "paired": p})["gain"] is p["ok"]
    losing = [{"gain": {"local mean": -1.0}}] * 2
    assert worlds.paired(losing, [-0.5, -0.5]) == {"against": "baseline", "diff": -0.5, "se": 0.0, "margin": -0.35,
                                                   "ok": False}


def test_the_offline_rescoring_runs_on_simulated_sessions():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bet_offline.py"), "--simulate", "3",
                          "--threshold", "0.6", "0.65"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("| 1.5, 1, 1, ")]
    assert len(rows) == 2 and "0.65 |" in rows[1]


def test_the_other_worlds_are_their_own_suite_and_seed(tmp_path, worlds):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "worlds.py"), "--split", "other", "--sessions", "2",
                          "--adaptive", "0", "--worlds", "2", "--processes", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "worlds_other.json").read_text())
    assert doc["seed"] == worlds.SEEDS["other"] not in (worlds.SEEDS["tune"], worlds.SEEDS["held-out"])
    name = worlds.OTHER_WORLDS[2].name
    assert name not in {w.name for w in worlds.WORLDS}
    assert list(doc["results"]) == [f"{name} | {lay}" for lay in worlds.LAYOUTS if lay != "adaptive"]
    assert "other parameters" in (tmp_path / "worlds_other.md").read_text()
    # the first nine worlds keep their place, so the committed tables' sessions are unchanged
    assert worlds.ALL_WORLDS[:len(worlds.WORLDS)] == worlds.WORLDS


def test_the_forecast_parts_run_on_the_same_sessions(tmp_path):
    """benchmarks/forecast_parts.py, tiny: every variant on the same two sessions of one world; the
    variants do reach the forecast (compare's intervals move) and the shipped one is the suite's."""
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "forecast_parts.py"), "--sessions", "2",
                          "--worlds", "1", "--processes", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "forecast_parts.json").read_text())
    parts = bench_module("forecast_parts")
    assert doc["seed"] == parts.worlds.SEEDS["tune"] and list(doc["summary"]) == [v.name for v in parts.VARIANTS]
    cells = doc["cells"]
    keys = [f"{parts.worlds.WORLDS[1].name} | {lay}" for lay in ("2+3x2", "2+6x1", "0+4x2")]
    assert all(list(cells[n]) == keys for n in cells)
    for name, s in doc["summary"].items():
        assert s["cells"] == 3 and 0 <= s["cells_both_goals"] <= 3 and s["sessions_per_cell"] == 2
        assert ("diff_vs_shipped_arms" in s) is (name != "shipped")
    # the shipped variant is worlds.py's own figure on the same sessions
    rows = [parts.worlds.fixed_session(parts.worlds.WORLDS[1], "2+3x2", doc["seed"], i) for i in range(2)]
    assert cells["shipped"][keys[0]]["cover_arms"] == parts.worlds.figures(rows)["cover_arms"]
    # the normal family: a fresh idea's mean and sd under the shipped prior's centres (a direct draw)
    from opsdctl.stats import forecast

    rng = np.random.default_rng(0)
    n = 400_000
    u = rng.random(n)
    h, p = forecast.HARMFUL, forecast.HELPFUL
    x = np.where(u < forecast.NULL_SHARE, 0.0, np.where(u < forecast.NULL_SHARE + (1 - forecast.NULL_SHARE) * h.share,
                                                        rng.normal(h.mean, h.sd, n), rng.normal(p.mean, p.sd, n)))
    fam = parts.normal_family()
    assert fam.null_share == 0.0 and fam.null_strength == 0.0 and len(fam.sides) == 1
    assert fam.sides[0].mean == pytest.approx(x.mean(), abs=0.02) and fam.sides[0].sd == pytest.approx(x.std(), abs=0.02)
    # the variants live inside the benchmark's process: the module is as shipped after each
    post, nodes = forecast.posterior, forecast.sigma_nodes
    for v in parts.VARIANTS:
        with parts.applied(v):
            pass
        assert forecast.posterior is post and forecast.sigma_nodes is nodes
    assert "| normal family |" in (tmp_path / "forecast_parts.md").read_text()
    # a chosen few variants, under another name; an unknown one is refused in one line
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "forecast_parts.py"), "--sessions", "2",
                          "--worlds", "3", "--variants", "former", "--name", "fam", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    fam_doc = json.loads((tmp_path / "fam.json").read_text())
    assert list(fam_doc["summary"]) == ["shipped", "former"] and "--name fam" in fam_doc["command"]
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "forecast_parts.py"), "--variants", "nope",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--variants: ['nope'] not among" in bad.stderr


def test_the_frontier_runs_and_its_richer_models_reduce_to_the_shipped_one(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bet_frontier.py"), "--sessions", "3",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "bet_frontier.json").read_text())
    assert doc["cells"] == 27 and doc["sessions"] == 3
    assert {r["model"] for r in doc["rows"]} >= {"normal (shipped), tau_min 1", "noise integrated, tau_min 1"}
    md = (tmp_path / "bet_frontier.md").read_text()
    assert "| normal (shipped), tau_min 1 | 0.65 | - | - |" in md and "| normal (shipped), tau_min 1 | 0.65 | - | 2.0 |" in md

    frontier = bench_module("bet_frontier")
    from opsdctl.stats import bet

    x, n, s2, nu, v_common = [1.8, -0.4, 0.3, -2.2], [1, 2, 1, 2], 2.1, 5.0, 0.6
    shipped_mean, shipped_p = bet.effect_posterior(x, [s2 / k for k in n], v_common, nu)
    # the same model: the shipped posterior, and "special" ideas that are never special
    m, p, _ = frontier.posterior(frontier.Model("normal", "normal"), x, n, s2, nu, v_common)
    np.testing.assert_allclose(m, shipped_mean, atol=1e-12)
    np.testing.assert_allclose(p, shipped_p, atol=1e-12)
    m, p, _ = frontier.posterior(frontier.Model("never", "special", p_special=1e-12), x, n, s2, nu, v_common)
    np.testing.assert_allclose(m, shipped_mean, atol=1e-9)
    # a noise known to many dof: the integrated model is the plug-in's normal one
    m, _, _ = frontier.posterior(frontier.Model("noise", "noise", noise_nodes=16), x, n, s2, 1e6, v_common)
    np.testing.assert_allclose(m, bet.effect_posterior(x, [s2 / k for k in n], v_common, None)[0], atol=1e-3)
    # a special idea lets a far-out run keep more of its lead than the plain family does
    far = [6.0, 0.1, -0.2, 0.3, -0.1, 0.0]
    plain = frontier.posterior(frontier.Model("p", "normal", tau_min=0.5), far, [1] * 6, 2.2, 5.0, 0.5)[0]
    special = frontier.posterior(frontier.Model("s", "special", tau_min=0.5, p_special=0.1), far, [1] * 6, 2.2, 5.0, 0.5)[0]
    assert special[0] > plain[0] + 0.5
