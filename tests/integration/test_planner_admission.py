"""Admission through the real worker with a remaining_file budget: what cannot finish is skipped, a
shorter chain runs, an eval that would be cut is not started."""

from __future__ import annotations

import os
import time


# --- through the real worker ----------------------------------------------------------------


def _config(ws, budget: bool, planner: str):
    text = (ws.root / "opsdctl.toml").read_text()
    text = text.split("\n[planner]")[0]
    if budget:
        text = text.replace("[budget]\n", '[budget]\nremaining_file = "remaining"\nmargin_minutes = 0\n', 1)
    ws.write_config(text + "\n[planner]\n" + planner)


def test_worker_skips_what_cannot_finish_and_runs_a_shorter_chain(ws):
    ws.recipe("long", 'extends = "baseline"\n[hparams]\nmax_completion_length = 4096\n')
    _config(ws, budget=False, planner="train_minutes = 3\neval_minutes = 3\n")
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")  # history for the baseline's cost key (seconds)
    _config(ws, budget=True, planner="train_minutes = 3\neval_minutes = 3\n")
    (ws.root / "remaining").write_text("150\n")  # 2.5 min
    ws.cli("queue", "long", "baseline")
    tl = {e["chain_id"]: e for e in ws.status()["planner"]["timeline"]}
    assert not tl[2]["fits"] and "needs ~" in tl[2]["reason"] and tl[3]["fits"] and tl[3]["start_in_s"] == 0
    assert "no: needs ~" in ws.cli("status").stdout
    res = ws.run("worker", "--drain")
    state, reason = ws.sql("select state, reason from chain where id = 2")[0]
    assert state == "skipped" and reason.startswith("needs ~") and reason.endswith("min left"), res.stdout
    assert float(reason.split("~")[1].split(" ")[0]) >= 3.0  # 3 min train (no history for mcl=4096) + eval
    assert ws.state(3) == "succeeded"
    assert "skipped: needs ~" in res.stdout


def test_worker_skips_an_eval_that_would_be_cut(ws, monkeypatch):
    from opsdctl.config import load_config
    from opsdctl.client.enqueue import queue_recipes
    from opsdctl.daemon.worker import Worker
    from opsdctl.store.engine import open_store

    monkeypatch.setenv("FAKE_STEP_SECONDS", "1.5")  # train takes ~6 s
    _config(ws, budget=True, planner="train_minutes = 0.05\neval_minutes = 0.25\n")  # 3 s + 15 s
    cfg = load_config(ws.root / "opsdctl.toml")
    store = open_store(cfg.db)
    queue_recipes(cfg, lambda: store, ["baseline"])
    (ws.root / "remaining").write_text("20\n")
    os.utime(ws.root / "remaining", (time.time(), time.time()))
    msgs = []
    Worker(cfg, store, drain=True, report=msgs.append).run()
    state, reason = ws.sql("select state, reason from chain where id = 1")[0]
    assert state == "skipped", msgs
    assert reason.startswith("eval: eval needs ~15 s, ") and reason.endswith(" left")
    assert ws.sql("select name, state from stage where chain_id = 1") == [("train", "succeeded")]
