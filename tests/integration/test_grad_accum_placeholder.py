"""{grad_accum} reaches a train command as the accumulation that keeps the profile's global batch
on the GPUs the chain was granted, and a GPU count that cannot keep it fails the chain in one line
before anything starts. The worker runs in-process (real stage subprocesses, real SQLite)."""

from __future__ import annotations

import sys

from conftest import FAKE_EVAL, FAKE_TRAIN, default_config
from gates import DefaultGate

from opsdctl.client.enqueue import queue_recipes
from opsdctl.config import load_config
from opsdctl.daemon.worker import Worker
from opsdctl.plan.gate import Grant
from opsdctl.store.engine import open_store


class Granting(DefaultGate):
    def __init__(self, gpus):
        super().__init__(devices=())
        self.gpus = gpus

    def grant(self, chain, stage):
        return Grant(self.gpus)


def run_chain(ws, gpus):
    train = (f"echo GA={{grad_accum}} N={{num_gpus}} && {sys.executable} {FAKE_TRAIN} --seed {{seed}} "
             "--output-dir {stage_dir}")
    ws.write_config(default_config(train=train, eval=f"{sys.executable} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}"))
    cfg = load_config(ws.root / "opsdctl.toml")
    store = open_store(cfg.db)
    queue_recipes(cfg, lambda: store, ["baseline"])
    Worker(cfg, store, drain=True, gate=Granting(gpus), report=lambda m: None).run()
    return ws.sql("select state, reason from chain")[-1]


def test_grad_accum_on_the_granted_gpus(ws):
    # the tiny profile: 4 rows per device x 2 accumulation x 1 process = a global batch of 8
    assert run_chain(ws, (0, 1))[0] == "succeeded"
    assert "GA=1 N=2" in (ws.runs / "1" / "train.log").read_text()


def test_a_gpu_count_that_cannot_keep_the_global_batch_fails_in_one_line(ws):
    state, reason = run_chain(ws, (0, 1, 2))
    assert state == "failed" and "{grad_accum}" in reason and "does not split over 3 GPU" in reason
    assert "\n" not in reason and not (ws.runs / "1" / "train.log").exists()
