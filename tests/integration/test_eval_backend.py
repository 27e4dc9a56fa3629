"""The HF backend's decode loop and the LoRA path: greedy matches `generate`, left padding
with position ids changes nothing, rows are seeded independently, an adapter is merged
(equal to PEFT's own merge) without touching the base file, and it changes the samples."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO
from fixtures_tiny import one_thread, tiny_assets, untrained_tiny_model  # noqa: F401  (pytest fixtures)

PROBLEMS = [{"id": "a", "problem": "What is 12 + 7?", "answer": "19"},
            {"id": "b", "problem": "Compute 15 - 4 + 8.", "answer": "19"}]


def spec(model, *, temperature=1.0, max_new=24, adapter=None, presence_penalty=0.0):
    return dict(backend="hf", model=str(model), dtype="float32", device="cpu", adapter=adapter, threads=1,
                sampling=dict(temperature=temperature, top_p=0.95, top_k=0, min_p=0.0,
                              presence_penalty=presence_penalty, max_new_tokens=max_new, thinking=True, seed=0),
                problems=PROBLEMS)


def drain(backend, task) -> dict[int, dict]:
    backend.submit(task)
    rows = []
    while backend.busy():
        rows += backend.step()
    return {r["sample"]: r for r in rows}


def task(problem=0, samples=(0, 1, 2), seeds=(11, 12, 13), max_new=None):
    return {"bid": f"t{problem}", "problem": problem, "samples": list(samples), "seeds": list(seeds),
            "max_new": max_new}


@pytest.fixture(scope="module")
def tiny_backend(tiny_assets):  # noqa: F811
    from eval.backends import HFBackend

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield HFBackend(spec(tiny_assets.model_dir, temperature=0.0))
    torch.set_num_threads(n)


def test_greedy_matches_generate(tiny_backend):
    b = tiny_backend
    got = drain(b, task(problem=1))
    ids = b.prompt_ids(1)
    ref = b.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                           max_new_tokens=24, do_sample=False, eos_token_id=sorted(b.stop_ids),
                           pad_token_id=b.pad_id)[0, len(ids):].tolist()
    if ref and ref[-1] in b.stop_ids:
        ref = ref[:-1]
    assert got[0]["text"] == b.tokenizer.decode(ref, skip_special_tokens=True)
    assert got[0]["n_tokens"] == len(ref) > 0
    assert got[0]["text"] == got[1]["text"] == got[2]["text"]


def test_left_padding_and_position_ids(tiny_backend):
    """Two prompts of different lengths in one batch decode as each does alone."""
    from eval.backends import _HFBatch

    b = tiny_backend
    p0, p1 = b.prompt_ids(0), b.prompt_ids(1)
    assert len(p0) != len(p1)
    alone = [drain(b, task(problem=i, samples=(0,), seeds=(1,)))[0]["text"] for i in (0, 1)]
    b.batch = _HFBatch(task(samples=(0, 1), seeds=(1, 2)), [p0, p1], [24, 24],
                       [torch.Generator().manual_seed(s) for s in (1, 2)])
    rows = []
    while b.busy():
        rows += b.step()
    assert [r["text"] for r in sorted(rows, key=lambda r: r["sample"])] == alone


def test_rows_are_seeded_and_lengths_capped(tiny_assets, one_thread):  # noqa: F811
    from eval.backends import HFBackend

    b = HFBackend(spec(tiny_assets.model_dir, temperature=1.0, presence_penalty=0.5))
    first = drain(b, task(seeds=(11, 12, 13), max_new=[24, 5, 24]))
    again = drain(b, task(seeds=(11, 12, 13), max_new=[24, 5, 24]))
    assert {s: r["text"] for s, r in first.items()} == {s: r["text"] for s, r in again.items()}
    assert first[1]["n_tokens"] <= 5
    other = drain(b, task(seeds=(21, 22, 23), max_new=[24, 5, 24]))
    assert [other[s]["text"] for s in range(3)] != [first[s]["text"] for s in range(3)]


@pytest.fixture(scope="module")
def adapter_dir(untrained_tiny_model, tmp_path_factory):  # noqa: F811
    """A LoRA adapter on the untrained tiny model with non-zero B (PEFT starts B at zero)."""
    from peft import LoraConfig, get_peft_model

    from opsdkit.modeling import load_model

    torch.manual_seed(3)
    model = get_peft_model(load_model(str(untrained_tiny_model)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    out = tmp_path_factory.mktemp("adapter") / "checkpoint-final"
    model.save_pretrained(out)
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_adapter_merge_equals_peft_merge(untrained_tiny_model, adapter_dir, tmp_path, one_thread):  # noqa: F811
    from peft import PeftModel

    from eval.backends import HFBackend
    from opsdkit.modeling import load_model

    weights = untrained_tiny_model / "model.safetensors"
    before = (_sha(weights), os.stat(weights).st_mtime_ns)
    ours = HFBackend(spec(untrained_tiny_model, adapter=str(adapter_dir)))
    assert (_sha(weights), os.stat(weights).st_mtime_ns) == before  # base file untouched
    peft_merged = PeftModel.from_pretrained(load_model(str(untrained_tiny_model)), str(adapter_dir)).merge_and_unload()
    base = HFBackend(spec(untrained_tiny_model))
    x = torch.tensor([ours.prompt_ids(0)])
    with torch.no_grad():
        got, want, plain = (m(input_ids=x).logits for m in (ours.model, peft_merged, base.model))
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, plain, atol=1e-2)


def _in_process(model, adapter, k, max_new) -> dict:
    """The samples a run would draw, computed here with the same micro-batches and seeds."""
    from eval import plan
    from eval.backends import HFBackend

    backend = HFBackend(spec(model, adapter=adapter, max_new=max_new))
    out = {}
    for b in plan.make_batches([p["id"] for p in PROBLEMS], k, seed=0):
        rows = drain(backend, {"bid": b.bid, "problem": b.problem, "samples": list(b.samples),
                               "seeds": list(b.seeds), "max_new": None})
        out.update({(b.problem_id, s): r["text"] for s, r in rows.items()})
    return out


def test_adapter_changes_the_samples_end_to_end(untrained_tiny_model, adapter_dir, tmp_path, one_thread):  # noqa: F811
    from integration.test_eval_e2e import env

    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    weights = untrained_tiny_model / "model.safetensors"
    before = _sha(weights)
    out = tmp_path / "lora"
    proc = subprocess.run([sys.executable, "-m", "eval", "--model", str(untrained_tiny_model), "--benchmark",
                           str(bench), "--k", "2", "--max-new-tokens", "12", "--gpus", "", "--quiet",
                           "--output-dir", str(out), "--adapter", str(adapter_dir)],
                          cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    lora = {(r["id"], r["sample"]): r["text"] for r in recs}
    settings = json.loads((out / "settings.json").read_text())
    assert settings["adapter"] == str(adapter_dir.resolve()) and settings["adapter_sha256"]
    assert json.loads((out / "result.json").read_text())["adapter"] == str(adapter_dir.resolve())
    assert _sha(weights) == before  # the base file was only read
    # The worker process drew exactly what this process draws with the merged adapter...
    assert lora == _in_process(untrained_tiny_model, str(adapter_dir), k=2, max_new=12)
    # ...and the base model draws something else.
    assert lora != _in_process(untrained_tiny_model, None, k=2, max_new=12)


# --- vLLM: a stand-in engine (vLLM cannot run on a CPU machine) behind vLLM's own API ------


class _FakeEngine:
    def __init__(self):
        self.requests = {}
        self.model_config = type("MC", (), {"max_model_len": 256})()

    def add_request(self, request_id, prompt, params):
        assert set(prompt) == {"prompt_token_ids"} and request_id not in self.requests
        self.requests[request_id] = (prompt["prompt_token_ids"], params)

    def step(self):
        outs = []
        for rid, (prompt, params) in list(self.requests.items()):
            n = min(params.max_tokens, 3 + params.seed % 5)  # "generation" depends on the seed only
            comp = type("C", (), {"text": f"\\boxed{{{params.seed % 7}}}", "token_ids": list(range(n)),
                                  "finish_reason": "length" if n == params.max_tokens else "stop"})()
            outs.append(type("O", (), {"request_id": rid, "finished": True, "outputs": [comp]})())
            del self.requests[rid]
        return outs


def test_vllm_backend_requests(monkeypatch, untrained_tiny_model):  # noqa: F811
    from eval.backends import VLLMBackend

    made = _stand_in_vllm(monkeypatch, untrained_tiny_model)
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    s = spec(untrained_tiny_model)
    s.update(backend="vllm", dtype="bfloat16", rows_per_batch=2,
             backend_options={"batch_invariant": True, "max_num_seqs": 4, "gpu_memory_utilization": 0.5})
    b = VLLMBackend(s)
    assert os.environ["VLLM_BATCH_INVARIANT"] == "1" and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert made["tensor_parallel_size"] == 1 and made["seed"] == 0 and made["max_num_seqs"] == 4
    assert b.free_slots() == 2
    b.submit({"bid": "a#0", "problem": 0, "samples": [0, 1], "seeds": [11, 12], "max_new": None})
    assert b.free_slots() == 1 and b.busy()
    params = [p for _, p in b.engine.requests.values()]
    assert [p.seed for p in params] == [11, 12] and all(p.top_k == -1 and p.top_p == 0.95 for p in params)
    assert all(p.max_tokens == 24 and p.temperature == 1.0 and p.stop_token_ids for p in params)
    rows = b.step()
    assert not b.busy()
    assert {(r["sample"], r["seed"], r["n_tokens"], r["finish_reason"]) for r in rows} == {
        (0, 11, 3 + 11 % 5, "stop"), (1, 12, 3 + 12 % 5, "stop")}
    assert all(r["problem"] == 0 and r["bid"] == "a#0" for r in rows)
    # Per-item lengths (benchmarks) are honoured, and capped by the context left after the prompt.
    b.submit({"bid": "b#0", "problem": 1, "samples": [0, 1], "seeds": [1, 2], "max_new": [1000, 3]})
    room = 256 - len(b.prompt_ids(1))
    assert [p.max_tokens for _, p in b.engine.requests.values()] == [room, 3]


def test_vllm_adapter_is_merged_once_into_the_output_dir(untrained_tiny_model, adapter_dir, tmp_path, one_thread):  # noqa: F811
    from eval.runner import _prepare_vllm_model
    from eval.settings import EvalSettings
    from opsdkit.modeling import load_model, merge_adapter_into

    weights = untrained_tiny_model / "model.safetensors"
    before = _sha(weights)
    st = EvalSettings(model=str(untrained_tiny_model), adapter=str(adapter_dir), adapter_sha256="x", benchmark="b",
                      benchmark_hash="h", n_benchmark=2, num_problems=2, k=2, reference_k=2, temperature=1.0,
                      top_p=1.0, top_k=0, min_p=0.0, presence_penalty=0.0, max_new_tokens=4, thinking=True, seed=0,
                      backend="vllm", dtype="float32", batch_size=None)
    path = _prepare_vllm_model(st, tmp_path, lambda m: None)
    assert Path(path) == tmp_path / "merged-model" and (Path(path) / "tokenizer.json").exists()
    assert _sha(weights) == before
    merged = load_model(path)
    ref = load_model(str(untrained_tiny_model))
    merge_adapter_into(ref, str(adapter_dir))
    for (n1, p1), (n2, p2) in zip(merged.state_dict().items(), ref.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1


def test_engines_sharing_a_gpu_start_one_at_a_time(tiny_assets):  # noqa: F811
    """A worker holding its GPU's start lock loads only once the previous engine has started:
    vLLM measures free memory while it starts, so two at once would miscount each other."""
    import multiprocessing as mp
    import queue as queue_mod

    from eval.worker import worker_main

    ctx = mp.get_context("spawn")
    lock, tasks, results = ctx.Lock(), ctx.Queue(), ctx.Queue()
    lock.acquire()  # an engine on the same GPU is still starting
    p = ctx.Process(target=worker_main, args=(0, {**spec(tiny_assets.model_dir), "ignore_eos": False}, tasks, results,
                                              os.getpid(), lock))
    p.start()
    try:
        with pytest.raises(queue_mod.Empty):
            results.get(timeout=4.0)  # time enough to load the tiny model, were it not waiting
        lock.release()
        kind, wid, info = results.get(timeout=60)
        assert (kind, wid) == ("ready", 0) and info["load_seconds"] >= 0
        tasks.put(None)
        assert results.get(timeout=60)[0] == "exit"
    finally:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()


def _vllm_settings(model, adapter):
    from eval.settings import EvalSettings

    return EvalSettings(model=str(model), adapter=str(adapter), adapter_sha256="x", benchmark="b",
                        benchmark_hash="h", n_benchmark=2, num_problems=2, k=2, reference_k=2, temperature=1.0,
                        top_p=1.0, top_k=0, min_p=0.0, presence_penalty=0.0, max_new_tokens=4, thinking=True, seed=0,
                        backend="vllm", dtype="float32", batch_size=None)


def test_vllm_engine_starts_from_the_base_and_loads_the_merge_in_place(monkeypatch, untrained_tiny_model, adapter_dir,
                                                                        tmp_path, one_thread):  # noqa: F811
    """--merged-weights push: the engine's model path is the base (vLLM keys its compile cache by
    it, so a per-chain merged dir would recompile every chain); the merge, written by a thread
    while the engine starts, is loaded into the engine and equals the on-disk merge."""
    import types

    from eval.backends import VLLMBackend
    from eval.runner import _BackgroundMerge
    from opsdkit.modeling import load_model, load_tokenizer, merge_adapter_into

    made, pushed, resets = {}, {}, []

    class Model:
        def load_weights(self, weights):
            for name, t in weights:
                pushed[name] = t.clone()
            return set(pushed)

    class LLM:
        def __init__(self, **kw):
            made.update(kw)
            self.llm_engine = _FakeEngine()

        def get_tokenizer(self):
            return load_tokenizer(str(untrained_tiny_model))

        def apply_model(self, fn):
            return [fn(Model())]

        def reset_prefix_cache(self):
            resets.append(1)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=object))
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # inherited: a run without it must still be without it
    before = _sha(untrained_tiny_model / "model.safetensors")
    dest = tmp_path / "merged-model"
    merge = _BackgroundMerge(_vllm_settings(untrained_tiny_model, adapter_dir), dest, lambda m: None)
    s = spec(untrained_tiny_model)
    s.update(backend="vllm", dtype="float32", rows_per_batch=2, merged_weights=str(dest),
             backend_options={"batch_invariant": False, "max_num_seqs": 4, "gpu_memory_utilization": 0.5})
    b = VLLMBackend(s)  # waits for the thread's dir, then pushes
    merge.join()
    assert merge.error is None and not (tmp_path / "merged-model.partial").exists()
    assert os.environ["VLLM_BATCH_INVARIANT"] == "0"
    assert made["model"] == str(untrained_tiny_model) and b.push_seconds is not None and resets == [1]
    ref = load_model(str(untrained_tiny_model))
    merge_adapter_into(ref, str(adapter_dir))
    want = {n: p for n, p in ref.state_dict().items() if n != "lm_head.weight" or not ref.config.tie_word_embeddings}
    assert set(pushed) == set(want)
    assert all(torch.equal(pushed[n], want[n]) for n in want)
    assert _sha(untrained_tiny_model / "model.safetensors") == before  # the base file only read


def test_a_failed_background_merge_fails_the_eval(untrained_tiny_model, tmp_path):  # noqa: F811
    from eval.runner import EvalFailed, _BackgroundMerge

    merge = _BackgroundMerge(_vllm_settings(untrained_tiny_model, tmp_path / "no-adapter"), tmp_path / "m", lambda m: None)
    merge.join()
    with pytest.raises(EvalFailed, match="merging the adapter failed"):
        merge.check()
    assert not (tmp_path / "m").exists()


def _stand_in_vllm(monkeypatch, model) -> dict:
    """A stand-in `vllm` module over _FakeEngine; returns the keywords LLM(...) was given."""
    import types

    from opsdkit.modeling import load_tokenizer

    made: dict = {}

    class LLM:
        def __init__(self, **kw):
            made.update(kw)
            self.llm_engine = _FakeEngine()

        def get_tokenizer(self):
            return load_tokenizer(str(model))

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=SamplingParams))
    return made


def test_vllm_batch_invariance_is_off_unless_asked(monkeypatch, untrained_tiny_model):  # noqa: F811
    """Measured on an H200 (docs/benchmarks.md): batch invariance cost 41% of the throughput, so it is opt-in."""
    from eval.backends import VLLMBackend
    from eval.cli import build_parser

    _stand_in_vllm(monkeypatch, untrained_tiny_model)
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    s = {**spec(untrained_tiny_model), "backend": "vllm", "dtype": "bfloat16", "rows_per_batch": 2,
         "backend_options": {"max_num_seqs": 4}}
    VLLMBackend(s)
    assert os.environ["VLLM_BATCH_INVARIANT"] == "0"
    base = ["--output-dir", "x"]
    assert build_parser().parse_args(base).batch_invariant is False
    assert build_parser().parse_args(base + ["--batch-invariant"]).batch_invariant is True
    assert build_parser().parse_args(base + ["--no-batch-invariant"]).batch_invariant is False


def test_vllm_forced_lengths_ignore_every_stop_token(monkeypatch, untrained_tiny_model):  # noqa: F811
    """Benchmarks force lengths: a stop token id drawn by a random model must not end a sample
    (ignore_eos alone leaves vLLM's stop_token_ids in force)."""
    from eval.backends import VLLMBackend

    _stand_in_vllm(monkeypatch, untrained_tiny_model)
    s = {**spec(untrained_tiny_model), "backend": "vllm", "dtype": "bfloat16", "rows_per_batch": 2,
         "backend_options": {"max_num_seqs": 4}}
    for forced in (True, False):
        b = VLLMBackend({**s, "ignore_eos": forced})
        b.submit({"bid": "a#0", "problem": 0, "samples": [0], "seeds": [3], "max_new": [50]})
        (params,) = [p for _, p in b.engine.requests.values()]
        assert params.ignore_eos is forced and (params.stop_token_ids == []) is forced
