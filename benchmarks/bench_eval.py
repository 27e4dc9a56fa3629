"""Evaluator throughput and balance: dynamic shared queue vs fixed round-robin shards.

Runs the real evaluator (eval.runner, HF backend, worker processes) twice on the same workload,
once per dispatch mode, and reports samples/s, tokens/s and the imbalance ratio (slowest
worker's busy seconds / mean busy seconds). The workload has long-tailed lengths like AIME
thinking traces: every problem gets a base length from a log-normal law, every sample a
jitter around it, and generation is forced to that length (eos ignored), all seeded.

GPU (default): random-init Qwen3-1.7B shapes in bf16 with the tiny tokenizer; one worker per
visible GPU, or --workers-per-gpu (default 4) processes sharing the GPU when only one is
visible. --smoke: the untrained tiny model on the CPU with 2 workers, in seconds.

    python benchmarks/bench_eval.py [--smoke] [--out FILE] [--problems 12] [--k 12]
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

# Workload defaults, sized for one H200 in under ~5 minutes: ~1,800 decode steps at batch <= 4 in
# all (~460 per worker with 4 workers), i.e. 35-140 s per dispatch mode at 13 steps/s per worker
# down to 13 steps/s shared by all four.
PROBLEMS = 12
K = 12
MEDIAN_TOKENS = 16  # median of the per-problem base length
SIGMA = 1.0  # log-normal spread across problems (the long tail)
JITTER = 0.3  # log-normal spread of samples around their problem's length
MAX_TOKENS = 128
SEED = 0


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


def build_model(work: Path, smoke: bool) -> str:
    from opsdkit.modeling import load_tokenizer
    from opsdkit.shapes import save_random_qwen3
    from opsdkit.tiny import build_untrained_tiny

    tiny = build_untrained_tiny(work / "tiny")
    if smoke:
        return str(tiny)
    import torch

    t0 = time.time()
    path = save_random_qwen3(work / "qwen3-1.7b-random", tokenizer=load_tokenizer(str(tiny)), dtype=torch.bfloat16)
    print(f"random Qwen3-1.7B shapes saved in {time.time() - t0:.0f} s", flush=True)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU, seconds")
    ap.add_argument("--out", help="JSON output (default benchmarks/results/eval_<device>.json)")
    ap.add_argument("--problems", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--median-tokens", type=float)
    ap.add_argument("--sigma", type=float, default=SIGMA)
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--workers-per-gpu", type=int, help="default: 4 on a single GPU, 1 with several GPUs")
    ap.add_argument("--cpu-workers", type=int, default=2)
    ap.add_argument("--work-dir", help="where the model and runs go (default: a temp dir)")
    args = ap.parse_args()

    from eval.benchmark import rows_to_problems
    from eval.runner import RunOptions, run
    from eval.settings import EvalSettings
    from opsdkit.tiny import make_benchmark

    slug, n_gpus = ("cpu", 0) if args.smoke else device_slug()
    problems_n = args.problems or (8 if args.smoke else PROBLEMS)
    k = args.k or (6 if args.smoke else K)
    median = args.median_tokens or (12 if args.smoke else MEDIAN_TOKENS)
    cap = args.max_tokens or (64 if args.smoke else MAX_TOKENS)
    if n_gpus:
        from eval.cli import _devices

        devices = _devices(None)  # CUDA_VISIBLE_DEVICES's ids when set, as the evaluator spells them
        per = args.workers_per_gpu or (4 if n_gpus == 1 else 1)
    else:
        devices, per = [], args.cpu_workers
    n_workers = per * max(1, len(devices))

    tmp = tempfile.TemporaryDirectory(prefix="bench-eval-") if not args.work_dir else None
    work = Path(args.work_dir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    model = build_model(work, args.smoke)
    problems = rows_to_problems(make_benchmark(problems_n, seed=7), "bench")
    ids = [p.id for p in problems]
    lengths = item_lengths(ids, k, median=median, sigma=args.sigma, jitter=JITTER, cap=cap, seed=SEED)
    settings = EvalSettings(
        model=model, adapter=None, adapter_sha256=None, benchmark="generated", benchmark_hash="-",
        n_benchmark=len(problems), num_problems=len(problems), k=k, reference_k=k, temperature=1.0, top_p=0.95,
        top_k=0, min_p=0.0, presence_penalty=0.0, max_new_tokens=cap, thinking=True, seed=SEED, backend="hf",
        dtype="bfloat16" if devices else "float32", batch_size=None)
    print(f"workload: {len(problems)} problems x {k} samples, {sum(lengths.values())} tokens "
          f"(per-sample length median {sorted(lengths.values())[len(lengths) // 2]}, max {max(lengths.values())}); "
          f"{n_workers} worker(s) on {len(devices) or 'CPU'} {'GPU(s)' if devices else ''}", flush=True)

    modes = {}
    per_sample = {}
    for mode in ("dynamic", "round-robin"):
        opts = RunOptions(output_dir=work / f"run-{mode}", devices=devices, workers_per_device=per,
                          threads=1 if not devices else 2, dispatch=mode, ignore_eos=True, start_together=True,
                          item_max_new=lambda pid, s: lengths[(pid, s)], quiet=True)
        shutil.rmtree(opts.output_dir, ignore_errors=True)  # a fresh run, never a resume
        doc = run(settings, problems, opts)
        busy = [w["busy_seconds"] for w in doc["workers"]]
        tokens = sum(p["mean_tokens"] * p["samples"] for p in doc["problems"])
        modes[mode] = {
            "generation_seconds": doc["generation_seconds"],
            "samples_per_second": doc["samples_per_second"],
            "tokens_per_second": round(tokens / doc["generation_seconds"], 1),
            "imbalance": doc["imbalance"],
            "busy_seconds": busy,
            "items": [w["items"] for w in doc["workers"]],
            "load_seconds": [w.get("load_seconds") for w in doc["workers"]],
        }
        recs = [json.loads(line) for line in (opts.output_dir / "samples.jsonl").read_text().splitlines()]
        per_sample[mode] = {(r["id"], r["sample"]): (r["text"], r["n_tokens"]) for r in recs}
        print(f"{mode:>12}: {modes[mode]['samples_per_second']:.2f} samples/s, "
              f"{modes[mode]['tokens_per_second']:.0f} tokens/s, {doc['generation_seconds']:.1f} s, "
              f"imbalance {doc['imbalance']:.3f} (busy s per worker: {', '.join(f'{b:.1f}' for b in busy)})",
              flush=True)

    dyn, rr = modes["dynamic"], modes["round-robin"]
    lengths_ok = all(per_sample["dynamic"][key][1] == n for key, n in lengths.items())
    result = {
        "device": slug, "n_gpus": n_gpus, "workers": n_workers, "workers_per_gpu": per if devices else None,
        "model": "untrained tiny (CPU smoke)" if args.smoke else "random-init Qwen3-1.7B shapes, bf16, tiny tokenizer",
        "backend": "hf",
        "workload": {"problems": len(problems), "k": k, "median_tokens": median, "sigma": args.sigma,
                     "jitter": JITTER, "max_tokens": cap, "total_tokens": sum(lengths.values()), "seed": SEED},
        "modes": modes,
        "speedup_dynamic_vs_round_robin": round(rr["generation_seconds"] / dyn["generation_seconds"], 3),
        "forced_lengths_respected": lengths_ok,
        # Same micro-batches and seeds in both modes: every sample should match, on any worker.
        "identical_samples_across_modes": per_sample["dynamic"] == per_sample["round-robin"],
        "smoke": args.smoke,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    print(f"dynamic vs round-robin: {result['speedup_dynamic_vs_round_robin']:.2f}x faster, imbalance "
          f"{dyn['imbalance']:.3f} vs {rr['imbalance']:.3f}; identical samples: "
          f"{result['identical_samples_across_modes']}", flush=True)
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"eval_{slug}{'_smoke' if args.smoke else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":  # spawned workers import this file as __mp_main__
    sys.exit(main())
