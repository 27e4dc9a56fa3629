"""The evaluator's engine, measured step by step: a child process that drives eval.backends'
VLLMBackend (HFBackend on the CPU) the way eval/worker.py does (a micro-batch from eval.plan's
dispatcher whenever the backend has a free slot, then a step), with every engine step timed and
described (sequences that got a token, their context and generated tokens, prefill and its
attention pairs, preemptions seen as a sequence skipping steps), and the parent that starts it.

Phases (one engine each, so each is one process):
- calibrate: the engine as the evaluator starts it (gpu_memory_utilization 0.85 of an 80 GB H100,
  64 sequences); (1) a sweep of long random prompts (1 to 64 sequences, 512 to 36,864 tokens of
  context, 64 decode steps each) maps a step's cost over the contexts real samples reach; (2) the
  real workload (30 problems x 12 samples at real lengths) for a bounded time;
- validate: the same engine with its KV cache cut to 1/scale of the calibrate engine's, running to
  completion two workloads at lengths / scale (so the same number of sequences fit): one engine's
  share of a 4-engine evaluation (every 4th micro-batch) and the whole 360 samples.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

from throughput import eval_model
from throughput.host_usage import TreeSampler, host_facts

EVAL_UTIL = 0.85  # the evaluator's default gpu_memory_utilization
MAX_SEQS = 64  # the evaluator's default max_num_seqs
H100_MIB = 81559
SWEEP = [(1, 1024), (1, 16384), (1, 36864), (4, 8192), (4, 32768), (16, 2048), (16, 16384), (16, 28000),
         (64, 512), (64, 4096), (64, 7000)]  # (sequences, prompt tokens)
SWEEP_DECODE = 64
PROBLEMS, K, SEED = 30, 12, 0
SMOKE = dict(problems=8, law=eval_model.LengthLaw(median=24, problem_sigma=0.6, sample_sigma=0.35, cap=48, min_tokens=2),
             scale=4, real_seconds=8.0)
COLUMNS = ("seconds", "seqs", "ctx", "gen", "prefill", "pairs")


class Trace:
    """Per-step columns, and what is known of each request to compute them."""

    def __init__(self):
        self.prompt: dict[str, int] = {}
        self.last: dict[str, int] = {}  # generated tokens at the request's last step
        self.seen: dict[str, int] = {}  # the step it last got a token
        self.step_no = 0
        self.reset()

    def reset(self) -> None:
        self.cols = {c: [] for c in COLUMNS}
        self.preemptions = 0

    def record(self, seconds: float, seqs: int, ctx: int, gen: int, prefill: int, pairs: int) -> None:
        for c, v in zip(COLUMNS, (seconds, seqs, ctx, gen, prefill, pairs)):
            self.cols[c].append(round(v, 6) if c == "seconds" else int(v))

    def to_json(self) -> dict:
        return {**self.cols, "preemptions": self.preemptions, "steps": len(self.cols["seconds"]),
                "tokens": sum(self.cols["seqs"]), "seconds_total": round(sum(self.cols["seconds"]), 3)}


class TracedEngine:
    """Stands in for the vLLM engine inside VLLMBackend: the same add_request and step, timed."""

    def __init__(self, engine, trace: Trace):
        self._engine, self.trace = engine, trace

    def add_request(self, request_id, prompt, params, *args, **kwargs):
        self.trace.prompt[request_id] = len(prompt["prompt_token_ids"])
        return self._engine.add_request(request_id, prompt, params, *args, **kwargs)

    def step(self):
        tr = self.trace
        t0 = time.perf_counter()
        outs = self._engine.step()
        dt = time.perf_counter() - t0
        tr.step_no += 1
        b = ctx = gen = prefill = pairs = 0
        for o in outs:
            rid = o.request_id
            if rid not in tr.prompt or not o.outputs:
                continue
            n, p = len(o.outputs[0].token_ids), tr.prompt[rid]
            prev = tr.last.get(rid)
            if prev is None:  # its prefill ended this step
                prefill, pairs = prefill + p, pairs + p * (p + 1) // 2
            elif tr.seen.get(rid) != tr.step_no - 1:  # off the batch for a while: preempted, recomputed
                size = p + prev
                prefill, pairs = prefill + size, pairs + size * (size + 1) // 2
                tr.preemptions += 1
            b, ctx, gen = b + 1, ctx + p + n, gen + n
            tr.last[rid], tr.seen[rid] = n, tr.step_no
            if o.finished:
                for d in (tr.prompt, tr.last, tr.seen):
                    d.pop(rid, None)
        tr.record(dt, b, ctx, gen, prefill, pairs)
        return outs

    def __getattr__(self, name):
        return getattr(self._engine, name)


def trace_hf(backend, trace: Trace) -> None:
    """The same columns for the HF backend (the CPU smoke run): one micro-batch at a time."""
    step = backend.step

    def traced():
        b = backend.batch
        rows, fresh = (list(b.rows), b.cache is None) if b is not None else ([], False)
        t0 = time.perf_counter()
        out = step()
        dt = time.perf_counter() - t0
        p = [len(b.prompts[r]) for r in rows] if rows else []
        g = [len(b.out[r]) for r in rows] if rows else []
        pre = sum(p) if fresh else 0
        trace.record(dt, len(rows), sum(p) + sum(g), sum(g), pre, sum(x * (x + 1) // 2 for x in p) if fresh else 0)
        return out

    backend.step = traced


class _LogLines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        try:
            self.lines.append(record.getMessage())
        except Exception:
            pass


def engine_facts(backend, lines: list[str]) -> dict:
    """KV blocks, block size, token budget and sequence cap of the started engine (its config,
    else its log line 'GPU KV cache size: N tokens')."""
    if not hasattr(backend, "llm"):  # HF: one micro-batch at a time, no paged cache
        rows = backend.spec.get("rows_per_batch", 4)
        return {"backend": "hf", "max_seqs": rows, "kv_blocks": 10**9, "block_size": 16, "token_budget": 10**9}
    eng = backend.llm.llm_engine
    cfg = getattr(eng, "vllm_config", None)
    cache, sched = getattr(cfg, "cache_config", None), getattr(cfg, "scheduler_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None) or 16
    logged = None
    for line in lines:
        m = re.search(r"GPU KV cache size: ([\d,]+) tokens", line)
        if m:
            logged = int(m.group(1).replace(",", ""))
    if not blocks and logged:
        blocks = logged // size
    return {"backend": "vllm", "max_seqs": getattr(sched, "max_num_seqs", None) or MAX_SEQS, "kv_blocks": blocks,
            "block_size": size, "token_budget": getattr(sched, "max_num_batched_tokens", None),
            "kv_tokens_logged": logged, "max_model_len": backend.max_len,
            "log": [x for x in lines if re.search(r"KV cache|concurrency|num_gpu_blocks|compile|graph", x, re.I)][:20]}


def sweep(backend, trace: Trace, facts: dict, budget_s: float, vocab: int) -> dict:
    """Long random prompts, SWEEP_DECODE steps each: a step's cost at contexts up to the cap."""
    from vllm import SamplingParams

    engine, rng = backend.engine, random.Random(0)
    kv = facts["kv_blocks"] * facts["block_size"]
    t_end = time.perf_counter() + budget_s
    done, skipped = [], []
    for seqs, prompt in SWEEP:
        if seqs * (prompt + SWEEP_DECODE + facts["block_size"]) > 0.9 * kv or prompt + SWEEP_DECODE > facts["max_model_len"]:
            skipped.append([seqs, prompt, "does not fit the KV cache"])
            continue
        if time.perf_counter() > t_end:
            skipped.append([seqs, prompt, "out of time"])
            continue
        params = SamplingParams(max_tokens=SWEEP_DECODE, ignore_eos=True, temperature=1.0, seed=1, stop_token_ids=[])
        ids = [f"sweep-{seqs}-{prompt}-{i}" for i in range(seqs)]
        for rid in ids:
            engine.add_request(rid, {"prompt_token_ids": [rng.randrange(10, vocab) for _ in range(prompt)]}, params)
        left = set(ids)
        while left:
            for o in engine.step():
                if o.finished:
                    left.discard(o.request_id)
        done.append([seqs, prompt])
    return {"configs": done, "skipped": skipped}


def drive(backend, trace: Trace, problems, lengths: dict, share=None, seconds: float | None = None) -> dict:
    """eval/worker.py's loop over eval.plan's batches, with forced lengths; cut at `seconds`."""
    from eval.grading import grade
    from eval.plan import Dispatcher, make_batches

    batches = make_batches([p.id for p in problems], K, SEED)
    if share is not None:
        batches = batches[share[0]::share[1]]
    dispatcher = Dispatcher(list(batches), proxy=[float(len(p.problem)) for p in problems])
    trace.reset()
    t0 = time.perf_counter()
    finished, wrong_length, first = 0, 0, None
    while True:
        while backend.free_slots() > 0 and (b := dispatcher.next()) is not None:
            backend.submit({"bid": b.bid, "problem": b.problem, "samples": list(b.samples), "seeds": list(b.seeds),
                            "max_new": [lengths[(b.problem_id, s)] for s in b.samples]})
        if not backend.busy():
            break
        for row in backend.step():
            grade(row["text"], problems[row["problem"]].answer)
            pid = problems[row["problem"]].id
            wrong_length += row["n_tokens"] != lengths[(pid, row["sample"])]
            dispatcher.record(row["problem"], row["n_tokens"])
            finished += 1
            first = first or time.perf_counter() - t0
        if seconds is not None and time.perf_counter() - t0 >= seconds:
            break
    total = sum(len(b.samples) for b in batches)
    return {"wall_s": round(time.perf_counter() - t0, 3), "complete": finished == total, "samples": total,
            "samples_done": finished, "lengths_not_as_forced": wrong_length, "first_sample_s": first,
            "share": list(share) if share else None, "trace": trace.to_json()}


def child_main(args) -> int:
    import psutil

    from opsdkit.startup_clock import since_process_start

    started = psutil.Process().create_time()
    import torch

    from eval.backends import backend_env, make_backend
    from eval.benchmark import rows_to_problems
    from opsdkit.tiny import make_benchmark

    smoke = args.smoke
    hook = _LogLines()
    if not smoke:  # vLLM configures its logger when imported: listen after that, before the engine starts
        os.environ.update(backend_env("vllm", {}))
        import vllm  # noqa: F401

        logging.getLogger("vllm").addHandler(hook)
    t_imports = since_process_start()
    problems = rows_to_problems(make_benchmark(SMOKE["problems"] if smoke else PROBLEMS, seed=7), "bench")
    law = SMOKE["law"] if smoke else eval_model.REAL_LAW
    backend_name = "hf" if smoke else "vllm"
    total_mib = torch.cuda.get_device_properties(0).total_memory / 2**20 if torch.cuda.is_available() else None
    util = EVAL_UTIL
    if total_mib and total_mib > 1.02 * H100_MIB and not args.native_memory:
        util = round(EVAL_UTIL * H100_MIB / total_mib, 4)  # the evaluator's budget on an 80 GB H100, in MiB
    options = {"gpu_memory_utilization": util, "max_num_seqs": MAX_SEQS}
    if args.kv_blocks:
        options["engine_args"] = {"num_gpu_blocks_override": args.kv_blocks}
    spec = {"backend": backend_name, "model": args.model_dir, "dtype": "bfloat16" if not smoke else "float32",
            "adapter": None, "merged_weights": None, "threads": 1, "ignore_eos": True, "extract": "released",
            "sampling": {"temperature": 1.0, "top_p": 0.95, "top_k": 0, "min_p": 0.0, "presence_penalty": 0.0,
                         "max_new_tokens": law.cap, "thinking": True, "seed": SEED},
            "backend_options": options, "rows_per_batch": K // 3,
            "problems": [{"id": p.id, "problem": p.problem, "answer": p.answer} for p in problems],
            "device": "cuda:0" if torch.cuda.is_available() and not smoke else "cpu"}
    if smoke:
        torch.set_num_threads(1)
    backend = make_backend(spec)
    backend.warmup()
    t_ready = since_process_start()
    trace = Trace()
    facts = engine_facts(backend, hook.lines)
    if hasattr(backend, "engine"):
        backend.engine = TracedEngine(backend.engine, trace)
    else:
        trace_hf(backend, trace)
    ids = [p.id for p in problems]
    real = eval_model.draw_lengths(law, ids, K, SEED)
    out = {"part": f"eval_{args.phase}", "smoke": smoke, "backend": backend_name, "engine": facts,
           "gpu_memory_utilization": util, "gpu_total_mib": round(total_mib) if total_mib else None,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "startup": {"process_to_imports_s": t_imports, "process_to_engine_ready_s": t_ready,
                       "backend": getattr(backend, "startup", None)},
           "process_start": started, "problem_ids": ids, "k": K, "seed": SEED,
           "prompt_tokens": [len(backend.prompt_ids(i)) for i in range(len(problems))],
           "proxy": [float(len(p.problem)) for p in problems], "law": law.__dict__, "runs": {}}
    if args.phase == "calibrate":
        if backend_name == "vllm":
            out["sweep"] = sweep(backend, trace, facts, args.sweep_seconds, len(backend.tokenizer))
            out["sweep"]["trace"] = trace.to_json()
        out["lengths"] = [[pid, s, n] for (pid, s), n in real.items()]
        seconds = SMOKE["real_seconds"] if smoke else args.real_seconds
        out["runs"]["real"] = drive(backend, trace, problems, real, seconds=seconds)
    else:
        scale = SMOKE["scale"] if smoke else args.scale
        scaled = eval_model.scale_lengths(real, scale)
        out.update(scale=scale, lengths=[[pid, s, n] for (pid, s), n in scaled.items()])
        t_end = time.perf_counter() + args.budget_s
        out["runs"]["share"] = drive(backend, trace, problems, scaled, share=(0, 4),
                                     seconds=max(1.0, t_end - time.perf_counter()))
        out["runs"]["full"] = drive(backend, trace, problems, scaled, seconds=max(1.0, t_end - time.perf_counter()))
    Path(args.out).write_text(json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)  # the engine's own teardown adds nothing to measure


def run_phase(phase: str, script: Path, work: Path, model_dir: str, env: dict, smoke: bool = False,
              kv_blocks: int | None = None, extra: list[str] | None = None, timeout_s: float = 540) -> dict:
    run_dir = work / "eval" / phase
    run_dir.mkdir(parents=True, exist_ok=True)
    out_file, log_path = run_dir / "result.json", run_dir / "engine.log"
    out_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(script), "_eval-engine", "--phase", phase, "--model-dir", model_dir,
           "--out", str(out_file), *(extra or [])]
    if kv_blocks:
        cmd += ["--kv-blocks", str(kv_blocks)]
    if smoke:
        cmd.append("--smoke")
    sampler = TreeSampler(period=1.0)
    sampler.start()
    t0 = time.time()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        sampler.watch("engine", proc.pid)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
    sampler.stop()
    doc = json.loads(out_file.read_text()) if out_file.exists() else {"part": f"eval_{phase}"}
    doc.update(exit_code=proc.returncode, wall_s=round(time.time() - t0, 1), ok=out_file.exists(),
               host=sampler.series["engine"].summary() if "engine" in sampler.series else None,
               gpu_memory=sampler.gpu_summary({"engine": proc.pid}), host_facts=host_facts())
    if not out_file.exists():
        doc["log_tail"] = log_path.read_text(errors="replace")[-4000:]
    return doc
