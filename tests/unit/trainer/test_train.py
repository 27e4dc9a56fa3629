"""trainer.train.run: a finished run leaves no process group behind for the interpreter's exit to
tear down (gloo's threads, destroyed by static destructors, can abort a finished run)."""

from __future__ import annotations

import torch.distributed as dist

from trainer import train


def test_a_finished_run_destroys_its_process_group(monkeypatch, tmp_path):
    class Done:
        def __init__(self, cfg):
            pass

        def train(self):
            return {"steps": 2}

    monkeypatch.setattr(train, "OPSDTrainer", Done)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        assert train.run(object()) == {"steps": 2}
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_single_process_run_has_no_group_to_destroy(monkeypatch):
    monkeypatch.setattr(train, "OPSDTrainer", lambda cfg: type("T", (), {"train": lambda self: {}})())
    assert not dist.is_initialized()
    assert train.run(object()) == {}
