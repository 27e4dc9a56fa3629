"""Evaluator throughput, balance and determinism on long-tailed lengths like AIME traces.

Runs the real evaluator (eval.runner, worker processes) several times on the same workload and
reports samples/s, tokens/s and the imbalance ratio (slowest worker's busy seconds / mean busy
seconds), per-sample equality between runs, and each worker's engine start. Every problem gets
a base length from a log-normal law, every sample a jitter around it, and generation is forced
to that length (eos ignored; random weights would never stop), all seeded.

vLLM (--backend vllm, the default on a GPU with vLLM): random-init Qwen3-1.7B shapes in bf16
with the tiny tokenizer, AIME-like lengths (median 1,500 tokens, up to 6,000), four runs:
VLLM_BATCH_INVARIANT on / off x 1 worker per GPU / 2 workers sharing each GPU, all with the
dynamic shared queue. Within a batch-invariance mode, the samples of 1 and 2 workers should be
identical only if the engine's numbers do not depend on what is batched together.
HF (--backend hf): dynamic shared queue vs fixed round-robin shards with 4 workers sharing one
GPU, short lengths (HF generate is ~25x slower). --smoke: the untrained tiny model on the CPU
with 2 workers, HF, in seconds.

    python benchmarks/bench_eval.py [--smoke] [--backend vllm|hf] [--out FILE] [--problems 10] [--k 12]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Workloads. HF: sized for one H200 in under ~5 minutes (~13 decode steps/s per worker).
# vLLM: AIME-like thinking lengths, ~190k tokens per run (seconds at vLLM's batch throughput,
# with a 6,000-token tail that a single sequence decodes in ~20 s).
WORKLOADS = {
    "hf": dict(problems=12, k=12, median=16, sigma=1.0, cap=128),
    "vllm": dict(problems=8, k=12, median=1500, sigma=0.6, cap=6000),
    "smoke": dict(problems=8, k=6, median=12, sigma=1.0, cap=64),
}
JITTER = 0.3  # log-normal spread of samples around their problem's length
SEED = 0
# (name, backend options, workers per GPU, dispatch)
VLLM_RUNS = [("bi-on-1w", {"batch_invariant": True}, 1, "dynamic"),
             ("bi-off-1w", {"batch_invariant": False}, 1, "dynamic"),
             ("bi-off-2w", {"batch_invariant": False}, 2, "dynamic"),
             ("bi-on-2w", {"batch_invariant": True}, 2, "dynamic")]
HF_RUNS = [("dynamic", {}, None, "dynamic"), ("round-robin", {}, None, "round-robin")]


def item_lengths(ids: list[str], k: int, *, median: float, sigma: float, jitter: float, cap: int,
                 seed: int) -> dict[tuple[str, int], int]:
    rng = random.Random(seed)
    out = {}
    for pid in ids:
        base = median * math.exp(rng.gauss(0.0, sigma))
        for s in range(k):
            out[(pid, s)] = int(min(cap, max(4, round(base * math.exp(rng.gauss(0.0, jitter))))))
    return out


def device_slug() -> tuple[str, int]:
    import torch

    if not torch.cuda.is_available():
        return "cpu", 0
    name = torch.cuda.get_device_name(0)
    m = re.search(r"(H200|H100|A100|L40S|L4|A10G|B200|GB200|RTX ?\d+)", name)
    return (m.group(1) if m else name).replace(" ", "").lower(), torch.cuda.device_count()


def build_model(work: Path, smoke: bool, model_dir: str | None = None) -> str:
    from opsdkit.modeling import load_tokenizer
    from opsdkit.shapes import cached_random_qwen3
    from opsdkit.tiny import build_untrained_tiny

    tiny = build_untrained_tiny(work / "tiny")
    if smoke:
        return str(tiny)
    import torch

    t0 = time.time()
    path = cached_random_qwen3(model_dir or work / "qwen3-1.7b-random", tokenizer=load_tokenizer(str(tiny)),
                               dtype=torch.bfloat16, device="cuda")
    torch.cuda.empty_cache()
    print(f"random Qwen3-1.7B shapes ready in {time.time() - t0:.0f} s: {path}", flush=True)
    return path


def _runs(backend: str, only: str | None) -> list[tuple]:
    runs = VLLM_RUNS if backend == "vllm" else HF_RUNS
    if only:
        wanted = [x.strip() for x in only.split(",") if x.strip()]
        unknown = [w for w in wanted if w not in {r[0] for r in runs}]
        if unknown:
            raise SystemExit(f"--runs {only}: unknown {unknown}; choose from {[r[0] for r in runs]}")
        runs = [r for r in runs if r[0] in wanted]
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU, seconds")
    ap.add_argument("--backend", choices=("auto", "hf", "vllm"), default="auto",
                    help="auto: vllm on a GPU with vLLM installed, else hf")
    ap.add_argument("--runs", help="comma list of run names to do (default: all of the backend's)")
    ap.add_argument("--out", help="JSON output (default benchmarks/results/eval_<device>[_vllm].json)")
    ap.add_argument("--problems", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--median-tokens", type=float)
    ap.add_argument("--sigma", type=float)
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--workers-per-gpu", type=int, help="HF runs: default 4 on a single GPU, 1 with several GPUs")
    ap.add_argument("--cpu-workers", type=int, default=2)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85, help="vLLM: each GPU's share for its engines")
    ap.add_argument("--work-dir", help="where the model and runs go (default: a temp dir)")
    ap.add_argument("--model-dir", help="random model dir to reuse (built there if missing)")
    args = ap.parse_args()

    from eval.benchmark import rows_to_problems
    from eval.runner import RunOptions, run
    from eval.settings import EvalSettings
    from opsdkit.tiny import make_benchmark

    slug, n_gpus = ("cpu", 0) if args.smoke else device_slug()
    backend = args.backend
    if backend == "auto":
        import importlib.util

        backend = "vllm" if n_gpus and importlib.util.find_spec("vllm") else "hf"
    if backend == "vllm" and (args.smoke or not n_gpus):
        raise SystemExit("--backend vllm needs a GPU (and no --smoke)")
    wl = dict(WORKLOADS["smoke" if args.smoke else backend])
    for key, val in (("problems", args.problems), ("k", args.k), ("median", args.median_tokens),
                     ("sigma", args.sigma), ("cap", args.max_tokens)):
        if val is not None:
            wl[key] = val
    if n_gpus:
        from eval.cli import _devices

        devices = _devices(None)  # CUDA_VISIBLE_DEVICES's ids when set, as the evaluator spells them
        hf_per = args.workers_per_gpu or (4 if n_gpus == 1 else 1)
    else:
        devices, hf_per = [], args.cpu_workers
    runs = _runs(backend, args.runs)

    tmp = tempfile.TemporaryDirectory(prefix="bench-eval-") if not args.work_dir else None
    work = Path(args.work_dir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    model = build_model(work, args.smoke, args.model_dir)
    problems = rows_to_problems(make_benchmark(wl["problems"], seed=7), "bench")
    ids = [p.id for p in problems]
    k = wl["k"]
    lengths = item_lengths(ids, k, median=wl["median"], sigma=wl["sigma"], jitter=JITTER, cap=wl["cap"], seed=SEED)
    total_tokens = sum(lengths.values())
    print(f"workload: {len(problems)} problems x {k} samples, {total_tokens} tokens (per-sample length median "
          f"{sorted(lengths.values())[len(lengths) // 2]}, max {max(lengths.values())}); {backend} on "
          f"{len(devices) or 'CPU'} {'GPU(s)' if devices else ''}", flush=True)
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / (
        f"eval_{slug}{'_smoke' if args.smoke else ''}{'_vllm' if backend == 'vllm' else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "device": slug, "n_gpus": n_gpus, "backend": backend,
        "model": "untrained tiny (CPU smoke)" if args.smoke else "random-init Qwen3-1.7B shapes, bf16, tiny tokenizer",
        "workload": {"problems": len(problems), "k": k, "median_tokens": wl["median"], "sigma": wl["sigma"],
                     "jitter": JITTER, "max_tokens": wl["cap"], "total_tokens": total_tokens, "seed": SEED},
        "runs": {}, "smoke": args.smoke, "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    per_sample: dict[str, dict] = {}

    def compare(a: str, b: str) -> dict:
        x, y = per_sample[a], per_sample[b]
        same = sum(x[key] == y.get(key) for key in x)
        return {"items": len(x), "identical": same, "all_identical": same == len(x) == len(y)}

    for name, options, per, dispatch in runs:
        per = per or hf_per
        settings = EvalSettings(
            model=model, adapter=None, adapter_sha256=None, benchmark="generated", benchmark_hash="-",
            n_benchmark=len(problems), num_problems=len(problems), k=k, reference_k=k, temperature=1.0, top_p=0.95,
            top_k=0, min_p=0.0, presence_penalty=0.0, max_new_tokens=wl["cap"], thinking=True, seed=SEED,
            backend=backend, dtype="bfloat16" if devices else "float32", batch_size=None,
            backend_options={**options, "gpu_memory_utilization": args.gpu_memory_utilization, "max_num_seqs": 64}
            if backend == "vllm" else {})
        opts = RunOptions(output_dir=work / f"run-{name}", devices=devices, workers_per_device=per,
                          threads=1 if not devices else 2, dispatch=dispatch, ignore_eos=True, start_together=True,
                          item_max_new=lambda pid, s: lengths[(pid, s)], quiet=True)
        shutil.rmtree(opts.output_dir, ignore_errors=True)  # a fresh run, never a resume
        t0 = time.time()
        try:
            doc = run(settings, problems, opts)
        except Exception as exc:  # one failed run must not lose the others' figures
            result["runs"][name] = {"error": f"{type(exc).__name__}: {str(exc)[-1500:]}"}
            print(f"{name:>12}: FAILED {type(exc).__name__}: {str(exc)[-400:]}", flush=True)
            out.write_text(json.dumps(result, indent=1) + "\n")
            continue
        busy = [w["busy_seconds"] for w in doc["workers"]]
        tokens = sum(p["mean_tokens"] * p["samples"] for p in doc["problems"])
        recs = [json.loads(line) for line in (opts.output_dir / "samples.jsonl").read_text().splitlines()]
        per_sample[name] = {(r["id"], r["sample"]): (r["text"], r["n_tokens"]) for r in recs}
        result["runs"][name] = {
            "backend_options": options, "workers": len(busy), "workers_per_gpu": per, "dispatch": dispatch,
            "wall_seconds": round(time.time() - t0, 1),
            "generation_seconds": doc["generation_seconds"],
            "samples_per_second": doc["samples_per_second"],
            "tokens_per_second": round(tokens / doc["generation_seconds"], 1),
            "imbalance": doc["imbalance"],
            "busy_seconds": busy,
            "items": [w["items"] for w in doc["workers"]],
            "load_seconds": [w.get("load_seconds") for w in doc["workers"]],
            "forced_lengths_respected": all(per_sample[name][key][1] == n for key, n in lengths.items()),
        }
        r = result["runs"][name]
        print(f"{name:>12}: {r['samples_per_second']:.2f} samples/s, {r['tokens_per_second']:.0f} tokens/s, "
              f"{doc['generation_seconds']:.1f} s, imbalance {doc['imbalance']:.3f} (busy s per worker: "
              f"{', '.join(f'{b:.1f}' for b in busy)}; engine start s: {r['load_seconds']})", flush=True)
        out.write_text(json.dumps(result, indent=1) + "\n")

    # per-sample equality, and the figures docs/benchmarks.md quotes
    done = [name for name, *_ in runs if name in per_sample]
    if backend == "vllm":
        eq, cost = {}, {}
        for mode in ("bi-on", "bi-off"):
            if f"{mode}-1w" in done and f"{mode}-2w" in done:
                eq[f"{mode}: 1 vs 2 workers"] = compare(f"{mode}-1w", f"{mode}-2w")
        for w in ("1w", "2w"):
            on, off = result["runs"].get(f"bi-on-{w}", {}), result["runs"].get(f"bi-off-{w}", {})
            if on.get("tokens_per_second") and off.get("tokens_per_second"):
                cost[w] = {"throughput_on_over_off": round(on["tokens_per_second"] / off["tokens_per_second"], 3)}
        result["identical_samples"] = eq
        result["batch_invariance_cost"] = cost
    else:
        if "dynamic" in done and "round-robin" in done:
            dyn, rr = result["runs"]["dynamic"], result["runs"]["round-robin"]
            result["speedup_dynamic_vs_round_robin"] = round(rr["generation_seconds"] / dyn["generation_seconds"], 3)
            result["identical_samples_across_modes"] = per_sample["dynamic"] == per_sample["round-robin"]
            print(f"dynamic vs round-robin: {result['speedup_dynamic_vs_round_robin']:.2f}x faster, imbalance "
                  f"{dyn['imbalance']:.3f} vs {rr['imbalance']:.3f}; identical samples: "
                  f"{result['identical_samples_across_modes']}", flush=True)
    for key in ("identical_samples", "batch_invariance_cost"):
        if key in result:
            print(f"{key}: {json.dumps(result[key])}", flush=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    if tmp is not None:
        tmp.cleanup()
    return 0 if all("error" not in r for r in result["runs"].values()) else 1


if __name__ == "__main__":  # spawned workers import this file as __mp_main__
    sys.exit(main())
