"""Sampling completions from the student: one interface, two backends.

- HFGenerateBackend: `generate` on the training model itself (adapter enabled, eval mode so
  LoRA dropout is off). CPU, tests, or no vLLM.
- VLLMColocatedBackend: a vLLM engine in the same process and GPU (gpu_memory_utilization of
  the profile), asleep while training. Before each rollout the student's weights are pushed:
  the LoRA-wrapped weights as W + scaling * B @ A computed out of place in fp32
  (opsdkit.modeling.merged_state_dict), the rest as they are; the training model's base
  weights are never written to, so the fixed teacher (adapter disabled) stays the base.
  vllm is imported lazily and only used when it and CUDA exist (choose_backend).

Both take left-unpadded prompt token lists and return completion token lists cut after the
first stop token (kept), at most max_new_tokens long.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch

from trainer.batch import trim_completion


@dataclass(frozen=True)
class SamplingSpec:
    temperature: float
    top_p: float
    top_k: int  # 0 or -1 = off
    max_new_tokens: int
    min_new_tokens: int = 0  # the benchmark forces full-length completions with it
    seed: int = 0

    @classmethod
    def from_knobs(cls, hparams: dict, max_new_tokens: int, seed: int = 0) -> "SamplingSpec":
        return cls(temperature=hparams["temperature"], top_p=hparams["top_p"], top_k=hparams["top_k"],
                   max_new_tokens=max_new_tokens, seed=seed)

    def with_seed(self, seed: int) -> "SamplingSpec":
        return replace(self, seed=seed)


class RolloutBackend:
    name = "base"

    def sync_weights(self, peft_model) -> None:
        """Make the sampler use the student's current weights."""

    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[int]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


# --- Hugging Face generate -----------------------------------------------------------------


def hf_generate_kwargs(spec: SamplingSpec, stop_ids: list[int], pad_id: int) -> dict:
    """Every sampling setting explicit, so nothing falls back to the model's generation_config."""
    return dict(do_sample=True, temperature=spec.temperature, top_p=spec.top_p,
                top_k=max(0, spec.top_k),  # 0 disables the top-k warper; -1 means off too
                max_new_tokens=spec.max_new_tokens, min_new_tokens=spec.min_new_tokens,
                eos_token_id=list(stop_ids), pad_token_id=pad_id, use_cache=True,
                num_beams=1, repetition_penalty=1.0, min_p=None, typical_p=1.0)


class HFGenerateBackend(RolloutBackend):
    name = "hf"

    def __init__(self, model, stop_ids: list[int], pad_id: int, batch_size: int | None = None):
        self.model = model
        self.stop_ids = list(stop_ids)
        self.pad_id = pad_id
        self.batch_size = batch_size

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[int]]:
        from trainer.batch import build

        was_training = self.model.training
        self.model.eval()  # no LoRA dropout while sampling; the KV cache stays on
        device = next(self.model.parameters()).device
        out: list[list[int]] = []
        step = self.batch_size or len(prompts)
        gen = torch.Generator(device="cpu").manual_seed(spec.seed)
        try:
            for i in range(0, len(prompts), step):
                chunk = prompts[i: i + step]
                batch = build(chunk, [[] for _ in chunk], self.pad_id)
                width = batch.prompt_width
                torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
                seqs = self.model.generate(
                    input_ids=batch.input_ids[:, :width].to(device),
                    attention_mask=batch.attention_mask[:, :width].to(device),
                    **hf_generate_kwargs(spec, self.stop_ids, self.pad_id),
                )
                stop = set(self.stop_ids)
                for row in seqs[:, width:].tolist():
                    out.append(trim_completion(row, stop, spec.max_new_tokens))
        finally:
            self.model.train(was_training)
        return out


# --- vLLM, colocated -----------------------------------------------------------------------


def vllm_sampling_kwargs(spec: SamplingSpec, stop_ids: list[int]) -> dict:
    """vLLM SamplingParams arguments: top_k -1 (not 0) is vLLM's "off". No per-request seed:
    the engine is seeded once, so equal prompts in a batch still get different samples."""
    return dict(n=1, temperature=spec.temperature, top_p=spec.top_p,
                top_k=spec.top_k if spec.top_k > 0 else -1, max_tokens=spec.max_new_tokens,
                min_tokens=spec.min_new_tokens, stop_token_ids=list(stop_ids),
                ignore_eos=spec.min_new_tokens >= spec.max_new_tokens > 0)


def vllm_weights(peft_model, adapter_name: str = "default"):
    """(name, tensor) pairs in the base model's naming: the LoRA-wrapped weights merged as new
    tensors (fp32 math, the base untouched), then every other base weight as it is."""
    from opsdkit.modeling import merged_state_dict

    merged = merged_state_dict(peft_model, adapter_name)
    yield from merged.items()
    wrapped = {k[: -len(".weight")] for k in merged}
    for name, param in peft_model.named_parameters():
        if "lora_" in name:
            continue
        key = name.removeprefix("base_model.model.")
        if ".base_layer." in key:
            module, _, leaf = key.partition(".base_layer.")
            if module in wrapped and leaf == "weight":
                continue  # replaced by the merged weight
            key = f"{module}.{leaf}"
        yield key, param.detach()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VLLMColocatedBackend(RolloutBackend):
    """One engine per training process (tensor parallel 1) on that process's GPU.

    distributed_executor_backend="external_launcher" runs the engine inside this process (so its
    model is reachable for load_weights, and accelerate's RANK/WORLD_SIZE are reused). Sleep
    level 1 between rollouts: the KV cache is freed and the weights wait in CPU memory, so the
    trainer gets the GPU back; waking restores the last pushed weights, hence one push per
    optimizer step serves every generate call of that step (rollouts and rationales).
    """

    name = "vllm"

    def __init__(self, model_path: str, *, gpu_memory_utilization: float, max_model_len: int,
                 stop_ids: list[int], seed: int, process_index: int = 0, dtype: str = "bfloat16"):
        from vllm import LLM  # lazy: only on GPU machines with vllm installed

        if "WORLD_SIZE" not in os.environ:  # plain `python -m trainer`: a world of one
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(_free_port()))
        self.stop_ids = list(stop_ids)
        self.llm = LLM(model=model_path, dtype=dtype, tensor_parallel_size=1,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                       enable_sleep_mode=True, distributed_executor_backend="external_launcher",
                       seed=seed + process_index, max_num_batched_tokens=max(4096, max_model_len))
        self.llm.sleep(level=1)
        self._awake: set[str] = set()

    def _wake(self, *tags: str) -> None:
        todo = [t for t in tags if t not in self._awake]
        if todo:
            self.llm.wake_up(tags=todo)
            self._awake.update(todo)

    def sync_weights(self, peft_model) -> None:
        torch.cuda.empty_cache()
        self._wake("weights")
        model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(vllm_weights(peft_model))
        self.llm.reset_prefix_cache()

    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[int]]:
        from vllm import SamplingParams

        self._wake("weights", "kv_cache")
        try:
            params = SamplingParams(**vllm_sampling_kwargs(spec, self.stop_ids))
            outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params,
                                     use_tqdm=False)
        finally:
            self.llm.sleep(level=1)
            self._awake.clear()
        stop = set(self.stop_ids)
        return [trim_completion(list(o.outputs[0].token_ids), stop, spec.max_new_tokens) for o in outs]

    def close(self) -> None:
        del self.llm
        torch.cuda.empty_cache()


def vllm_available() -> bool:
    import importlib.util

    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def choose_backend(requested: str) -> str:
    """auto -> vllm when vllm and CUDA exist, else hf; an explicit vllm without them is refused."""
    from opsdctl.errors import UserError

    if requested == "auto":
        return "vllm" if vllm_available() else "hf"
    if requested == "vllm" and not vllm_available():
        raise UserError("--rollout-backend vllm: needs CUDA and the vllm package (pip install -e '.[gpu]'); "
                        "use --rollout-backend hf or auto")
    return requested
