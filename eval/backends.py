"""Generation backends behind one small interface, used inside a worker process.

    backend = make_backend(spec)           # loads the model on this process's device
    backend.free_slots() -> int            # micro-batches it can take now
    backend.submit(task)                   # task: {"bid", "problem", "samples", "seeds", "max_new"}
    backend.step() -> list[row]            # advances; rows finished: {"bid", "problem", "sample", "seed",
                                           #   "text", "n_tokens", "finish_reason"}
    backend.busy() -> bool

- HFBackend (CPU tests, also GPU): one micro-batch at a time through our own decode loop with a
  KV cache. Left padding with position ids from the attention mask; each row samples with its
  own seeded torch.Generator; finished rows leave the batch. A row's tokens are a function of
  its micro-batch alone, so results do not depend on the worker count.
- VLLMBackend (GPUs): one engine per worker process (tensor parallel 1), fed request by request
  through the engine's step loop, with per-request seeds. vLLM's reproducibility guide: outputs
  only stop depending on what else is scheduled with batch invariance (VLLM_BATCH_INVARIANT=1,
  --batch-invariant; off by default: it cost 41% of the throughput on an H200, docs/benchmarks.md), and on
  the same hardware and vLLM version. With an adapter the engine
  starts from the base model, whose path keys vLLM's compile cache (the same for every chain),
  while the parent merges the adapter; the merged weights are then loaded into it in place.
"""

from __future__ import annotations

import os
import time

from opsdkit.prompts import chat_prompt, eval_text


def wait_for_dir(path: str, poll_s: float = 0.1) -> None:
    """Until `path` exists (written elsewhere and renamed into place), or our parent is gone."""
    from pathlib import Path

    parent = os.getppid()
    while not Path(path).is_dir():
        if os.getppid() != parent:
            raise RuntimeError(f"the parent died before {path} was written")
        time.sleep(poll_s)


def safetensors_items(model_dir: str):
    """(name, CPU tensor) for every tensor in a model dir's *.safetensors files."""
    from pathlib import Path

    from safetensors import safe_open

    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():
                yield key, st.get_tensor(key)


def backend_env(backend: str, options: dict, environ=None) -> dict:
    """Environment a backend needs before it is imported: vLLM reads these at import or engine start."""
    if backend != "vllm":
        return {}
    environ = os.environ if environ is None else environ
    # the engine in this process, so it dies with us (unless the user chose otherwise); batch
    # invariance explicit either way: an inherited VLLM_BATCH_INVARIANT=1 must not turn a run
    # without it into one with it
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0"),
            "VLLM_BATCH_INVARIANT": "1" if options.get("batch_invariant", False) else "0"}


def make_backend(spec: dict):
    return (VLLMBackend if spec["backend"] == "vllm" else HFBackend)(spec)


def _dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


class _Base:
    def __init__(self, spec: dict):
        self.spec = spec
        self.sampling = spec["sampling"]
        self.ignore_eos = bool(spec.get("ignore_eos"))
        self._prompt_ids: dict[int, list[int]] = {}

    def prompt_ids(self, problem: int) -> list[int]:
        if problem not in self._prompt_ids:
            text = chat_prompt(self.tokenizer, eval_text(self.spec["problems"][problem]["problem"]),
                               thinking=self.sampling["thinking"])
            self._prompt_ids[problem] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self._prompt_ids[problem]


# --- Hugging Face -------------------------------------------------------------------------


class _HFBatch:
    """Decode state of one micro-batch."""

    def __init__(self, task, prompts, max_new, generators):
        self.task = task
        self.rows = list(range(len(prompts)))  # original row index of each live row
        self.prompts = prompts
        self.max_new = max_new
        self.generators = generators
        self.out: list[list[int]] = [[] for _ in prompts]
        self.cache = None
        self.mask = None
        self.next_input = None
        self.seen = None


class HFBackend(_Base):
    def __init__(self, spec: dict):
        super().__init__(spec)
        import torch

        from opsdkit.modeling import load_model, load_tokenizer, merge_adapter_into, stop_token_ids

        self.torch = torch
        self.device = torch.device(spec["device"])
        self.tokenizer = load_tokenizer(spec["model"], padding_side="left")
        # Load and merge on the CPU (fp32 math for the merge), then move: the base file is only read.
        model = load_model(spec["model"], dtype=_dtype(spec["dtype"]), attn_implementation="sdpa")
        if spec.get("adapter"):
            merge_adapter_into(model, spec["adapter"])
        self.model = model.to(self.device).eval()
        self.stop_ids = set(stop_token_ids(self.tokenizer, self.model))
        self.pad_id = self.tokenizer.pad_token_id
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
        # transformers 5.x renamed past_key_values to cache; accept both.
        import inspect

        self.cache_kw = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        self.batch: _HFBatch | None = None

    def warmup(self) -> None:
        """Two decode steps on a throwaway row: nothing of it is kept."""
        import torch

        saved = self.batch
        self.batch = _HFBatch({"bid": "warmup", "problem": 0, "samples": [0], "seeds": [0]},
                              [self.prompt_ids(0)], [2], [torch.Generator(device=self.device).manual_seed(0)])
        while self.batch is not None:
            self.step()
        self.batch = saved

    def free_slots(self) -> int:
        return 0 if self.batch else 1

    def busy(self) -> bool:
        return self.batch is not None

    def submit(self, task: dict) -> None:
        torch = self.torch
        prompt = self.prompt_ids(task["problem"])
        n = len(task["samples"])
        room = max(1, self.max_positions - len(prompt))
        max_new = [min(room, m) for m in (task.get("max_new") or [self.sampling["max_new_tokens"]] * n)]
        gens = []
        for seed in task["seeds"]:
            g = torch.Generator(device=self.device)
            g.manual_seed(int(seed))
            gens.append(g)
        self.batch = _HFBatch(task, [prompt] * n, max_new, gens)

    def _prefill(self, b: _HFBatch):
        torch = self.torch
        width = max(len(p) for p in b.prompts)
        ids = torch.full((len(b.prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(b.prompts), width), dtype=torch.long)
        for i, p in enumerate(b.prompts):  # left padding: prompt and completion stay contiguous
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        from transformers import DynamicCache

        b.cache = DynamicCache()
        b.mask = mask.to(self.device)
        pos = (b.mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), pos

    def step(self) -> list[dict]:
        torch = self.torch
        b = self.batch
        s = self.sampling
        with torch.inference_mode():
            if b.cache is None:
                input_ids, pos = self._prefill(b)
            else:
                input_ids = b.next_input
                pos = b.mask.sum(-1, keepdim=True) - 1
            out = self.model(input_ids=input_ids, attention_mask=b.mask, position_ids=pos,
                             use_cache=True, logits_to_keep=1, **{self.cache_kw: b.cache})
            logits = out.logits[:, -1, :].float()
            if s["presence_penalty"] != 0.0:
                from eval.sampling import apply_presence_penalty

                if b.seen is None:
                    b.seen = torch.zeros_like(logits, dtype=torch.bool)
                logits = apply_presence_penalty(logits, b.seen, s["presence_penalty"])
            from eval.sampling import sample_next

            tokens = sample_next(logits, b.generators, temperature=s["temperature"], top_k=s["top_k"],
                                 top_p=s["top_p"], min_p=s["min_p"])
            if b.seen is not None:
                b.seen[torch.arange(len(tokens), device=tokens.device), tokens] = True
        finished, keep = [], []
        for j, tok in enumerate(tokens.tolist()):
            r = b.rows[j]
            if tok in self.stop_ids and not self.ignore_eos:
                finished.append(self._row(b, r, "stop"))
                continue
            b.out[r].append(tok)
            if len(b.out[r]) >= b.max_new[r]:
                finished.append(self._row(b, r, "length"))
            else:
                keep.append(j)
        if not keep:
            self.batch = None
            return finished
        if len(keep) < len(b.rows):  # finished rows leave the batch (and its KV cache)
            idx = torch.tensor(keep, device=self.device)
            b.cache.batch_select_indices(idx)
            b.mask = b.mask[idx]
            tokens = tokens[idx]
            if b.seen is not None:
                b.seen = b.seen[idx]
            b.rows = [b.rows[j] for j in keep]
            b.generators = [b.generators[j] for j in keep]
        b.mask = torch.cat([b.mask, b.mask.new_ones((len(b.rows), 1))], dim=1)
        b.next_input = tokens[:, None]
        return finished

    def _row(self, b: _HFBatch, r: int, reason: str) -> dict:
        ids = b.out[r]
        return {"bid": b.task["bid"], "problem": b.task["problem"], "sample": b.task["samples"][r], "seed": b.task["seeds"][r],
                "text": self.tokenizer.decode(ids, skip_special_tokens=True), "n_tokens": len(ids),
                "finish_reason": reason}


# --- vLLM ---------------------------------------------------------------------------------


class VLLMBackend(_Base):
    def __init__(self, spec: dict):
        super().__init__(spec)
        opts = spec.get("backend_options", {})
        os.environ.update(backend_env("vllm", opts, os.environ))  # before vllm is imported (or prewarm did it)
        t0 = time.perf_counter()
        from vllm import LLM, SamplingParams

        t1 = time.perf_counter()
        self.SamplingParams = SamplingParams
        self.llm = LLM(model=spec["model"], tokenizer=spec["model"], tensor_parallel_size=1, dtype=spec["dtype"],
                       seed=int(self.sampling["seed"]), gpu_memory_utilization=float(opts.get("gpu_memory_utilization", 0.85)),
                       max_num_seqs=int(opts.get("max_num_seqs", 64)), generation_config="vllm",
                       **dict(opts.get("engine_args") or {}))  # benchmarks: e.g. num_gpu_blocks_override
        # where a start goes (docs/benchmarks.md): the import, then the engine (config, weights, compile, graphs)
        self.startup = {"vllm_import": round(t1 - t0, 2), "vllm_engine": round(time.perf_counter() - t1, 2)}
        self.engine = self.llm.llm_engine
        self.tokenizer = self.llm.get_tokenizer()
        self.max_seqs = int(opts.get("max_num_seqs", 64))
        self.max_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.stop_ids = self._stop_ids()
        self.running: dict[str, tuple[dict, int]] = {}  # request id -> (task, row)
        self.push_seconds = None
        if spec.get("merged_weights"):
            self._push_merged(spec["merged_weights"])

    def _push_merged(self, weights_dir: str) -> None:
        """Load the adapter-merged weights into the running engine, in place (the parent merges
        while the engine starts from the base model; runner._BackgroundMerge)."""
        t0 = time.perf_counter()
        wait_for_dir(weights_dir)
        self.llm.apply_model(lambda model: model.load_weights(safetensors_items(weights_dir)))
        self.llm.reset_prefix_cache()
        self.push_seconds = round(time.perf_counter() - t0, 2)

    def warmup(self) -> None:
        pass  # the engine warms itself up (profiling run, CUDA graphs) when it starts

    def _stop_ids(self) -> list[int]:
        from opsdkit.modeling import stop_token_ids

        return stop_token_ids(self.tokenizer)

    def free_slots(self) -> int:
        rows = self.spec.get("rows_per_batch", 4)
        return max(0, (self.max_seqs - len(self.running)) // rows)

    def busy(self) -> bool:
        return bool(self.running)

    def submit(self, task: dict) -> None:
        s = self.sampling
        prompt = self.prompt_ids(task["problem"])
        n = len(task["samples"])
        room = max(1, self.max_len - len(prompt))
        max_new = [min(room, m) for m in (task.get("max_new") or [s["max_new_tokens"]] * n)]
        for r, (sample, seed) in enumerate(zip(task["samples"], task["seeds"])):
            params = self.SamplingParams(
                n=1, temperature=s["temperature"], top_p=s["top_p"], top_k=s["top_k"] if s["top_k"] > 0 else -1,
                min_p=s["min_p"], presence_penalty=s["presence_penalty"], max_tokens=max_new[r], seed=int(seed),
                # forced lengths (benchmarks) ignore every stop token, as the HF backend does
                stop_token_ids=[] if self.ignore_eos else self.stop_ids, ignore_eos=self.ignore_eos,
                skip_special_tokens=True)
            rid = f"{task['bid']}/{sample}"
            self.engine.add_request(rid, {"prompt_token_ids": prompt}, params)
            self.running[rid] = (task, r)

    def step(self) -> list[dict]:
        finished = []
        for out in self.engine.step():
            if not out.finished or out.request_id not in self.running:
                continue
            task, r = self.running.pop(out.request_id)
            c = out.outputs[0]
            finished.append({"bid": task["bid"], "problem": task["problem"], "sample": task["samples"][r], "seed": task["seeds"][r],
                             "text": c.text, "n_tokens": len(c.token_ids),
                             "finish_reason": c.finish_reason if c.finish_reason in ("stop", "length") else str(c.finish_reason)})
        if not finished and not self.running:
            time.sleep(0.001)
        return finished
