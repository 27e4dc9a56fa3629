"""The worker's policy seam (opsdctl.plan.gate): order, admit (start/skip/wait), grant GPUs per
stage, progress records with a stop decision, and the after-stage release hook. The worker
runs in-process here (real stage subprocesses, real SQLite)."""

from __future__ import annotations

import json
import sys

from conftest import FAKE_EVAL, FAKE_TRAIN, default_config
from gates import DefaultGate

from opsdctl.config import load_config
from opsdctl.plan.gate import Grant, Skip, Start, Stop, Wait
from opsdctl.run.enqueue import queue_recipes
from opsdctl.run.worker import Worker
from opsdctl.store.engine import open_store
from opsdctl.store.states import State


class ScriptedGate(DefaultGate):
    def __init__(self):
        super().__init__(devices=())
        self.log = []
        self.waited = False

    def order(self, queued):
        return sorted(queued, key=lambda c: -c.chain_id)  # newest first: the seam owns the order

    def admit(self, chain):
        self.log.append(("admit", chain.chain_id))
        if chain.variant == "cosine":
            return Skip("needs ~46 min, 31 min left")
        if not self.waited:
            self.waited = True
            return Wait(0.05, "GPU 0 held by pid 4242 (61000 MiB)")
        return Start()

    def grant(self, chain, stage):
        self.log.append(("grant", chain.chain_id, stage))
        return Grant((2, 3))

    def on_progress(self, chain, stage, record):
        self.log.append(("progress", chain.chain_id, stage, record.get("source")))
        if stage == "eval" and chain.variant == "token-clip" and "problems" in record:
            return Stop(f"futile at k={record['look_k']}", State.FAILED)
        return None

    def released(self, chain, stage, pids):
        self.log.append(("released", chain.chain_id, stage, len(pids)))


def _setup(ws, **kw):
    train = f"echo CVD=$CUDA_VISIBLE_DEVICES GPUS={{gpus}} N={{num_gpus}} && {sys.executable} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}"
    ev = f"{sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}"
    ws.write_config(default_config(train=train, eval=ev, **kw))
    cfg = load_config(ws.root / "opsdctl.toml")
    return cfg, open_store(cfg.db)


def test_gate_seam(ws, monkeypatch):
    monkeypatch.setenv("FAKE_LOOK", "1")  # a look record after 4 of 8 problems ...
    monkeypatch.setenv("FAKE_PROBLEMS", "8")
    monkeypatch.setenv("FAKE_EVAL_SECONDS", "0.4")  # ... then 1.6 s more: time enough to be stopped
    monkeypatch.setenv("FAKE_BAR", "1")  # the Trainer's bar: progress records from the log too
    cfg, store = _setup(ws)
    queue_recipes(cfg, lambda: store, ["baseline", "cosine", "token-clip"])
    gate = ScriptedGate()
    messages = []
    ran = Worker(cfg, store, drain=True, gate=gate, report=messages.append).run()
    assert ran == 2
    states = dict(ws.sql("select id, state from chain"))
    assert states == {1: "succeeded", 2: "skipped", 3: "failed"}
    assert ws.sql("select reason from chain where id = 2") == [("needs ~46 min, 31 min left",)]
    # order: newest first; chain 3 had to wait, so the worker went on to the next admissible one
    admits = [e[1] for e in gate.log if e[0] == "admit"]
    assert admits[:4] == [3, 2, 1, 3]
    assert [r[0] for r in ws.sql("select chain_id from stage where name = 'train' order by id")] == [1, 3]
    # grants reach the stage as CUDA_VISIBLE_DEVICES, {gpus} and {num_gpus}
    assert "CVD=2,3 GPUS=2,3 N=2" in (ws.runs / "1" / "train.log").read_text()
    assert ws.sql("select distinct gpus from stage") == [("2,3",)]
    # every stage was released, with its pids
    released = [e for e in gate.log if e[0] == "released"]
    assert [(e[1], e[2]) for e in released] == [(1, "train"), (1, "eval"), (3, "train"), (3, "eval")]
    assert all(e[3] >= 1 for e in released)
    # progress records came from progress.jsonl (train and eval) and log adapters
    assert ("progress", 1, "train", "progress.jsonl") in gate.log and ("progress", 1, "train", "log") in gate.log
    # the stop: chain 3 ended failed with the policy's reason, its partial score kept and flagged
    assert ws.sql("select reason, stage from chain where id = 3") == [("futile at k=4", "eval")]
    assert ws.sql("select state, reason from stage where chain_id = 3 and name = 'eval'") == [("stopped", "futile at k=4")]
    k, partial, source, n = ws.sql("select k, partial, source, n_problems from score where chain_id = 3")[0]
    assert (k, partial, source, n) == (4, 1, "progress", 4)
    assert not (ws.runs / "3" / "eval" / "result.json").exists()  # it was stopped before the end


def test_default_gate_skips_when_the_budget_is_spent(ws):
    (ws.root / "remaining").write_text("60\n")  # one minute left, five kept as margin
    cfg, store = _setup(ws, budget='remaining_file = "remaining"\nmargin_minutes = 5')
    queue_recipes(cfg, lambda: store, ["baseline"])
    assert Worker(cfg, store, drain=True, report=lambda m: None).run() == 0
    state, reason = ws.sql("select state, reason from chain")[0]
    assert state == "skipped" and "budget exhausted" in reason
    status = ws.status()
    assert status["budget"]["kind"] == "remaining_file" and status["budget"]["usable_seconds"] < 0
    assert json.dumps(status)  # serialisable
