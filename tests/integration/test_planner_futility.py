"""Futility end to end with fake_eval's look record: the chain ends `stopped-futile`, its partial
score is kept and flagged, compare never pools it, and it is opt-in and spares the baseline."""

from __future__ import annotations

from conftest import default_config


def _futile_ws(ws, monkeypatch):
    monkeypatch.setenv("FAKE_LOOK", "1")  # a look record after 4 of 8 problems ...
    monkeypatch.setenv("FAKE_PROBLEMS", "8")
    monkeypatch.setenv("FAKE_EVAL_SECONDS", "0.4")  # ... then 1.6 s more: time to be stopped
    text = default_config().replace(
        'variant = "baseline"', 'variant = "baseline"\nreference = { mean = 95.0, sd = 1.48, n = 5 }')
    ws.write_config(text + '\n[planner]\npolicy = "adaptive"\nfutility = true\n')


def test_futility_stop_end_to_end(ws, monkeypatch):
    from opsdctl.config import load_config
    from opsdctl.run.enqueue import queue_recipes
    from opsdctl.run.worker import Worker
    from opsdctl.store.engine import open_store

    _futile_ws(ws, monkeypatch)
    cfg = load_config(ws.root / "opsdctl.toml")
    store = open_store(cfg.db)
    queue_recipes(cfg, lambda: store, ["cosine"], repeats=2)
    msgs = []
    ran = Worker(cfg, store, drain=True, report=msgs.append).run()
    assert ran == 1
    state, reason = ws.sql("select state, reason from chain where id = 1")[0]
    assert state == "stopped-futile", msgs
    assert reason.startswith("futile at k=4 (4 problems): delta ") and "< 0" in reason
    assert ws.sql("select state, reason from stage where chain_id = 1 and name = 'eval'") == [("stopped", reason)]
    k, partial, source, n = ws.sql("select k, partial, source, n_problems from score where chain_id = 1")[0]
    assert (k, partial, source, n) == (4, 1, "progress", 4)
    # the adaptive policy skips the variant's other queued chain, with the reason
    state2, reason2 = ws.sql("select state, reason from chain where id = 2")[0]
    assert state2 == "skipped" and "stopped as futile (chain 1" in reason2
    # compare never pools the partial score with full runs
    doc = ws.cli_json("compare")
    assert all(1 not in (e.get("chain_ids") or []) for e in doc["variants"])
    status = {c["chain_id"]: c for c in ws.status()["chains"]}
    assert status[1]["state"] == "stopped-futile" and status[1]["partial"] is True
    assert "stopped-futile" in ws.cli("status").stdout


def test_futility_is_opt_in_and_spares_the_baseline(ws, monkeypatch):
    from opsdctl.config import load_config
    from opsdctl.run.enqueue import queue_recipes
    from opsdctl.run.worker import Worker
    from opsdctl.store.engine import open_store

    _futile_ws(ws, monkeypatch)
    monkeypatch.setenv("FAKE_EVAL_SECONDS", "0.05")
    text = (ws.root / "opsdctl.toml").read_text().replace("futility = true", "futility = false")
    ws.write_config(text)
    cfg = load_config(ws.root / "opsdctl.toml")
    store = open_store(cfg.db)
    queue_recipes(cfg, lambda: store, ["token-clip"])
    Worker(cfg, store, drain=True, report=lambda m: None).run()
    assert ws.state(1) == "succeeded"
    # on: the baseline itself is never judged against itself
    from opsdctl.plan.planner import with_overrides

    cfg = with_overrides(cfg, futility=True)
    queue_recipes(cfg, lambda: store, ["baseline"])
    Worker(cfg, store, drain=True, report=lambda m: None).run()
    assert ws.state(2) == "succeeded"
