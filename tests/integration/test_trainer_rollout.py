"""The colocated vLLM backend's protocol, without vLLM: a stand-in `vllm` module records what the
backend asks of the engine (the real engine is exercised on the GPU machine only).

Checked here: engine arguments (sleep mode, gpu_memory_utilization from the profile, in-process
executor), the sleep/wake order around weight pushes and generation, the pushed weights (merged
out of place, base untouched), sampling arguments and completion trimming; backend choice."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from fixtures_tiny import untrained_tiny_model  # noqa: F401  (pytest fixture)

from trainer.rollout import SamplingSpec, VLLMColocatedBackend, vllm_weights

torch.set_num_threads(1)


class FakeLLM:
    instances: list["FakeLLM"] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.events: list = []
        self.loaded: dict = {}
        fake = self

        class Model:
            def load_weights(self, weights):
                fake.events.append("load_weights")
                fake.loaded = {k: v.clone() for k, v in weights}

        runner = types.SimpleNamespace(model=Model())
        worker = types.SimpleNamespace(model_runner=runner)
        self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(driver_worker=worker))
        FakeLLM.instances.append(self)

    def sleep(self, level):
        self.events.append(("sleep", level))

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags)))

    def reset_prefix_cache(self):
        self.events.append("reset_prefix_cache")

    def generate(self, prompts, sampling_params, use_tqdm=False):
        self.events.append(("generate", len(prompts)))
        self.last_params = sampling_params
        # every completion: 3 tokens, a stop token (2), then junk that must be cut
        return [types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=[4, 5, 6, 2, 9, 9])])
                for _ in prompts]


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM = FakeLLM
    mod.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", mod)
    monkeypatch.setenv("WORLD_SIZE", "1")
    FakeLLM.instances.clear()
    return mod


@pytest.fixture
def peft_model(untrained_tiny_model):  # noqa: F811
    from opsdctl.recipes import knobs
    from opsdkit.modeling import load_model
    from trainer.model import trainable_parameters, wrap_with_lora

    model = wrap_with_lora(load_model(str(untrained_tiny_model)), {**knobs.default_hparams(), "lora_r": 4}, seed=0)
    with torch.no_grad():
        for p in trainable_parameters(model):
            p.normal_(0, 0.1)
    return model


def test_vllm_protocol(fake_vllm, peft_model):
    backend = VLLMColocatedBackend("/models/m", gpu_memory_utilization=0.45, max_model_len=5000, stop_ids=[2, 3],
                                   seed=7, process_index=1)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_sleep_mode"] is True and llm.kwargs["gpu_memory_utilization"] == 0.45
    assert llm.kwargs["distributed_executor_backend"] == "external_launcher"  # in-process: load_weights reachable
    assert llm.kwargs["seed"] == 8 and llm.kwargs["max_model_len"] == 5000 and llm.kwargs["tensor_parallel_size"] == 1
    assert llm.events == [("sleep", 1)]  # asleep until the first rollout

    base_before = {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_" not in n}
    backend.sync_weights(peft_model)
    assert llm.events[1:] == [("wake_up", ("weights",)), "load_weights", "reset_prefix_cache"]
    want = dict(vllm_weights(peft_model))
    assert llm.loaded.keys() == want.keys() and all(torch.equal(llm.loaded[k], want[k]) for k in want)
    assert all(torch.equal(p, base_before[n]) for n, p in peft_model.named_parameters() if "lora_" not in n)

    spec = SamplingSpec(temperature=1.1, top_p=0.95, top_k=0, max_new_tokens=5)
    out = backend.generate([[1, 2, 3], [4]], spec)
    assert out == [[4, 5, 6, 2], [4, 5, 6, 2]]  # cut after the first stop token, which is kept
    assert llm.events[4:] == [("wake_up", ("kv_cache",)), ("generate", 2), ("sleep", 1)]
    assert llm.last_params["top_k"] == -1 and llm.last_params["max_tokens"] == 5
    assert llm.last_params["stop_token_ids"] == [2, 3] and llm.last_params["temperature"] == 1.1
    # a second call in the same step (reason_first's rationales) wakes the last pushed weights
    backend.generate([[1]], spec)
    assert llm.events[7:] == [("wake_up", ("weights", "kv_cache")), ("generate", 1), ("sleep", 1)]


def test_trainer_builds_vllm_with_profile_settings(fake_vllm, monkeypatch, tmp_path, untrained_tiny_model):  # noqa: F811
    import json

    from opsdctl.recipes import knobs
    from opsdctl.recipes.profiles import get_profile, with_overrides
    from opsdkit.tiny import make_rows
    from trainer.cli import TrainConfig
    from trainer.train import MAX_PROMPT_TOKENS, OPSDTrainer

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_rows(8, seed=1)))
    monkeypatch.setattr("trainer.train.choose_backend", lambda requested: "vllm")
    prof = with_overrides(get_profile("tiny"), model=str(untrained_tiny_model), dataset=str(data),
                          gpu_memory_utilization=0.25)
    cfg = TrainConfig(profile=prof, hparams={**knobs.default_hparams(), "max_completion_length": 16},
                      method=knobs.default_method(), seed=3, output_dir=tmp_path / "o", rollout_backend="vllm")
    tr = OPSDTrainer(cfg)
    assert tr.backend.name == "vllm"
    kw = FakeLLM.instances[-1].kwargs
    assert kw["gpu_memory_utilization"] == 0.25 and kw["max_model_len"] == MAX_PROMPT_TOKENS + 16
    assert kw["model"] == str(untrained_tiny_model)
