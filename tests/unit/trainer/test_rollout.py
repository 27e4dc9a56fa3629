"""Which rollout backend the trainer picks (auto, hf, vllm)."""

from __future__ import annotations

import pytest
import torch

from opsdctl.errors import UserError
from trainer import rollout
from trainer.rollout import choose_backend

torch.set_num_threads(1)


def test_backend_choice(monkeypatch):
    monkeypatch.setattr(rollout, "vllm_available", lambda: False)
    assert choose_backend("auto") == "hf" and choose_backend("hf") == "hf"
    with pytest.raises(UserError, match="vllm"):
        choose_backend("vllm")
    monkeypatch.setattr(rollout, "vllm_available", lambda: True)
    assert choose_backend("auto") == "vllm"
