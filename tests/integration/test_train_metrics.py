"""Training statistics from any script: `[stages.train.metrics]` regexes read
from the train log land in the per-step curve and the summary, `show` and compare's training
columns use them, and the learning rate of each logged step is kept in the curve. Real worker
subprocesses running tests/stages/fake_train.py, real SQLite."""

from __future__ import annotations

import textwrap

import pytest
from support.stage_output import FRAC, KL

METRICS = textwrap.dedent(f"""
    [stages.train.metrics]
    kl = '{KL}'
    frac_clipped = '{FRAC}'
    kl_max = 'max=([0-9.]+)'
    """)


def _config(ws, metrics: str = METRICS):
    ws.write_config((ws.root / "opsdctl.toml").read_text() + metrics)


def test_a_user_script_gets_kl_clipping_and_lr_per_step(ws):
    _config(ws)
    ws.cli("queue", "cosine", "baseline")
    # a user's script: no metrics.jsonl or train_result.json, only its log
    ws.run("worker", "--drain", env={"FAKE_NO_FILES": "1", "FAKE_OPSD_LINES": "1", "FAKE_STEPS": "4"})
    show = ws.cli_json("show", "cosine")
    tr = show["runs"][0]["train"]
    kls = [0.1 / s for s in (1, 2, 3, 4)]
    assert tr["mean_kl"] == pytest.approx(sum(kls) / 4, abs=1e-4)  # two processes +-0.01 average out
    assert tr["frac_clipped"] == pytest.approx(0.3)
    assert tr["metrics"]["kl_max"] == {"mean": pytest.approx(3.5), "last": pytest.approx(5.0), "steps": 4}
    curve = tr["curve"]
    assert [p["step"] for p in curve] == [1, 2, 3, 4]
    assert [p["kl"] for p in curve] == pytest.approx(kls, abs=1e-4)
    assert all(p["frac_clipped"] == pytest.approx(0.3) for p in curve)
    # the learning rate of each logged step: a cosine decay from the recipe's 5e-6
    lrs = [p["learning_rate"] for p in curve]
    assert lrs[0] == pytest.approx(5e-6) and lrs == sorted(lrs, reverse=True) and lrs[-1] < 2e-6
    base_lrs = [p["learning_rate"] for p in ws.cli_json("show", "baseline")["runs"][0]["train"]["curve"]]
    assert base_lrs == [5e-6] * 4  # constant
    # show's table: KL, clipped and the extra metric, no "-"
    table = ws.cli("show", "cosine").stdout
    header = next(line for line in table.splitlines() if "KL" in line)
    assert "kl_max" in header
    row = next(line for line in table.splitlines() if line.lstrip().startswith("1 "))
    assert f"{sum(kls) / 4:.4g}"[:5] in row and "30.0%" in row and "3.5" in row
    # compare's training columns (behind --explain)
    out = ws.cli("compare", "--explain").stdout
    training = out[out.index("Training"):]
    assert "KL" in training and "clipped" in training and "kl_max" in training and "30.0%" in training
    doc = ws.cli_json("compare")
    rows = {r["name"]: r for r in doc["training"]}
    assert rows["cosine"]["mean_kl"] == pytest.approx(sum(kls) / 4, abs=1e-4)
    assert rows["baseline"]["runs"] == 1 and rows["cosine"]["metrics"]["kl_max"] == pytest.approx(3.5)


def test_without_declared_metrics_a_log_only_script_shows_dashes(ws):
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain", env={"FAKE_NO_FILES": "1", "FAKE_OPSD_LINES": "1"})
    tr = ws.cli_json("show", "baseline")["runs"][0]["train"]
    assert tr["mean_kl"] is None and tr["frac_clipped"] is None and tr["metrics"] == {}
    assert all("learning_rate" in p for p in tr["curve"])  # the HF dict lines still give the lr


def test_declared_metrics_also_apply_to_our_trainer_files(ws):
    _config(ws)
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain", env={"FAKE_OPSD_LINES": "1"})
    tr = ws.cli_json("show", "baseline")["runs"][0]["train"]
    # metrics.jsonl says frac_clipped = 0.25; the declared log line (0.3) wins, as the user asked
    assert tr["frac_clipped"] == pytest.approx(0.3) and tr["steps"] == 4
    assert tr["curve"][0]["learning_rate"] == pytest.approx(5e-6) and "loss" in tr["curve"][0]


@pytest.mark.parametrize("body, words", [
    ("kl = 'KL=[0-9.]+'", "has 0 groups; it needs exactly one"),
    ("kl = '(KL)=([0-9.]+)'", "has 2 groups"),
    ("kl = 'KL=([0-9.]+'", "not a valid regex"),
    ("'my-metric' = 'x=([0-9]+)'", "cannot name a metric"),
    ("step = 'step ([0-9]+)'", "cannot name a metric"),
    ("kl = 3", "must be a regex string"),
])
def test_bad_metric_declarations_are_refused_in_one_line(ws, body, words):
    _config(ws, "\n[stages.train.metrics]\n" + body + "\n")
    res = ws.cli("queue", "baseline", check=False)
    assert res.returncode == 2, res.stderr
    err = " ".join(res.stderr.split())
    assert "[stages.train] metrics" in err and words in err, err
    assert not ws.db.exists() or ws.sql("select count(*) from chain") == [(0,)]


def test_show_plot_draws_the_training_curves(ws):
    import struct

    _config(ws)
    ws.cli("queue", "cosine", "baseline")
    ws.run("worker", "--drain", env={"FAKE_NO_FILES": "1", "FAKE_OPSD_LINES": "1", "FAKE_STEPS": "6"})
    png = ws.root / "curves.png"
    out = ws.cli("show", "cosine", "--plot", png)
    assert f"plot: {png}" in out.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 1000 and height >= 600  # two columns of panels: loss, KL, clipped, lr, kl_max
    # a variant with no curve yet: a warning, no file
    ws.cli("queue", "token-clip")
    empty = ws.cli("show", "token-clip", "--plot", ws.root / "none.png")
    assert "no run has a training curve yet" in empty.stderr and not (ws.root / "none.png").exists()
