"""`[export]`: the worker writes the current best variant's recipe.env before
the budget runs out, again whenever the leader changes, with a header giving the verdict and its
evidence; `status` shows what was last written and when. The leader rule is a pure function of
the compare report; the rest runs a real worker on real subprocess stages and a real store."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import default_config, stop_process, wait_for

from opsdctl.recipes import knobs
from opsdctl.plan.submission import pick_leader
from tests.support.report_doc import report as typed


def _config(ws, seconds_left: int, minutes_before: float = 10):
    ws.write_config(default_config(budget=f'remaining_file = "remaining"\nmargin_minutes = 0') + textwrap_export(minutes_before))
    (ws.root / "remaining").write_text(f"{seconds_left}\n")
    ws.recipe("hot", 'extends = "token-clip"\n[hparams]\nlearning_rate = 1e-5\n')  # +15 points in fake_eval
    ws.env.update({"FAKE_PROBLEMS": "30", "FAKE_K": "8"})  # 240 samples a run: a clear verdict


def textwrap_export(minutes_before: float) -> str:
    return f'\n[export]\npath = "submission/recipe.env"\nminutes_before_deadline = {minutes_before}\n'


def _header(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("#"))


def test_written_near_the_deadline_and_again_when_the_leader_changes(ws):
    _config(ws, seconds_left=300)  # 5 min left: inside the last 10 min
    target = ws.root / "submission" / "recipe.env"
    ws.cli("queue", "baseline", "--repeats", "3")  # 3 + 3 runs: the 4 repeat dof a verdict needs
    first = ws.run("worker", "--drain")
    assert "export: wrote" in first.stdout and "<- baseline (the released recipe)" in first.stdout
    text = target.read_text()
    assert knobs.parse_recipe_env(text, "recipe.env") == {}  # the empty recipe: the released one
    assert "no candidate is above the baseline with P >=" in _header(text)
    assert "before the deadline" in _header(text) and "forecast of the official 5-run mean: baseline " in _header(text)
    st = ws.status()["export"]
    assert st["path"] == str(target) and st["active"] and st["last"]["leader"] == "baseline"
    written_at = st["last"]["written_at"]

    ws.cli("queue", "hot", "--repeats", "3")
    second = ws.run("worker", "--drain")
    assert "<- hot (" in second.stdout and "the leader changed" in second.stdout, second.stdout
    last = ws.status()["export"]["last"]
    assert last["leader"] == "hot" and last["verdict"] == "better" and last["n"] == 3, second.stdout
    text = target.read_text()
    assert knobs.parse_recipe_env(text, "recipe.env") == {"learning_rate": 1e-5}
    head = _header(text)
    assert f"leader: hot, verdict better, P(beat baseline) {last['p_beat']:.3f}" in head
    assert "the leader changed" in head or "new runs behind the evidence" in head
    assert "evidence: 3 runs, mean" in head and "vs baseline " in head and "runs in the store)" in head and "95% CI [" in head
    assert "the highest posterior effect among candidates above the baseline" in head
    f = last["forecast"]
    assert f"forecast of the official 5-run mean: hot {f['mean']:.2f}, 80% interval [{f['low80']:.2f}" in head
    assert "the baseline's forecast: " in head
    assert "code: the live code dir (snapshot_code = false)" in head
    assert "clip_mode" in head and "cannot travel in recipe.env" in head  # the method knob is named
    assert "opsdctl export-recipe: variant hot" in head  # export-recipe's own header follows ours
    # the compare report agrees with what was written
    doc = ws.cli_json("compare")
    assert pick_leader(typed(doc)).name == "hot"
    st = ws.status()["export"]["last"]
    assert st["leader"] == "hot" and st["verdict"] == "better" and st["written_at"] >= written_at
    assert f"<- hot (forecast {f['mean']:.2f} [{f['low80']:.2f}, {f['high80']:.2f}], better) at" in ws.cli("status").stdout

    # nothing changed: a worker start leaves the file alone
    mtime = target.stat().st_mtime_ns
    third = ws.run("worker", "--drain")
    assert "export: wrote" not in third.stdout and target.stat().st_mtime_ns == mtime
    target.unlink()  # gone: written again
    assert "export: wrote" in ws.run("worker", "--drain").stdout and target.is_file()


def test_not_written_before_its_time(ws):
    _config(ws, seconds_left=3600)
    ws.cli("queue", "baseline")
    out = ws.run("worker", "--drain")
    assert "export:" not in out.stdout and not (ws.root / "submission").exists()
    st = ws.status()["export"]
    assert st["active"] is False and st["last"] is None and st["when"].startswith("starts 10 min before the deadline")
    assert "nothing written yet; starts 10 min before the deadline" in ws.cli("status").stdout
    # before it is due, the worker keeps the bet current for status (the file is not touched)
    ws.cli("queue", "hot", "--repeats", "2")
    ws.cli("queue", "baseline", "--repeats", "1")
    ws.run("worker", "--drain")
    bet = ws.status()["export"]["bet"]
    doc = ws.cli_json("compare")
    assert bet == {"leader": "hot", "variant": "hot", "forecast": pick_leader(typed(doc)).forecast.to_json()}
    f = bet["forecast"]
    assert f"bet  hot: forecast {f['mean']:.2f} [{f['low80']:.2f}, {f['high80']:.2f}]" in ws.cli("status").stdout
    assert not (ws.root / "submission").exists()


def test_written_while_a_chain_runs_when_the_time_comes(ws):
    _config(ws, seconds_left=3600)
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")  # a scored baseline; nothing written (50+ min left)
    # 10 min + 3 s left: the export falls due while the next chain's evaluation hangs
    ws.write_config((ws.root / "opsdctl.toml").read_text())
    (ws.root / "remaining").write_text("603\n")
    os.utime(ws.root / "remaining", (time.time(), time.time()))
    ws.cli("queue", "token-clip")
    worker = ws.popen("worker", env={"FAKE_HANG": "1"})
    target = ws.root / "submission" / "recipe.env"
    try:
        wait_for(lambda: target.is_file(), 60, interval=0.2, what="the export while chain 2 runs")
        assert ws.state(2) == "running"  # the session could end now: the file is already there
        assert knobs.parse_recipe_env(target.read_text(), "recipe.env") == {}
        ws.cli("cancel", "2", "--grace", "0")
    finally:
        stop_process(worker)


@pytest.mark.parametrize("body, words", [
    ("minutes_before_deadline = -1", "[export] minutes_before_deadline = -1"),
    ('path = ""', "[export] path: must not be empty"),
    ("pth = 'x'", "unknown key (did you mean path?)"),
])
def test_bad_export_config_is_refused(ws, body, words):
    ws.write_config(default_config() + f"\n[export]\n{body}\n")
    res = ws.cli("status", check=False)
    assert res.returncode == 2 and words in " ".join(res.stderr.split()), res.stderr


def test_status_json_has_no_export_without_the_section(ws):
    assert ws.status()["export"] is None
    assert json.dumps(ws.status())  # plain JSON


def test_without_export_the_worker_keeps_the_bet_for_status(ws):
    """No [export]: no file anywhere, but status still says what --leader would submit now."""
    ws.write_config(default_config())
    ws.recipe("hot", 'extends = "token-clip"\n[hparams]\nlearning_rate = 1e-5\n')
    ws.env.update({"FAKE_PROBLEMS": "30", "FAKE_K": "8"})
    assert ws.status()["bet"] is None  # no worker has run yet
    ws.cli("queue", "hot", "baseline", "--repeats", "2")
    out = ws.run("worker", "--drain")
    assert "export:" not in out.stdout and "bet:" not in out.stdout  # nothing written, nothing failed
    doc = ws.status()
    assert doc["export"] is None
    bet, lead = doc["bet"], pick_leader(typed(ws.cli_json("compare")))
    assert bet == {"leader": lead.name, "variant": lead.variant, "forecast": lead.forecast.to_json()} and bet["leader"] == "hot"
    f = bet["forecast"]
    assert (f"bet  hot: forecast {f['mean']:.2f} [{f['low80']:.2f}, {f['high80']:.2f}], P(best) {f['p_best']:.2f}"
            in ws.cli("status").stdout)
    assert not any(p.name == "recipe.env" for p in ws.root.rglob("recipe.env") if "runs" not in p.parts)
