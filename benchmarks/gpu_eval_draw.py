"""A re-evaluation's fresh samples on a GPU with vLLM: `python -m eval` run as the worker runs it,
with OPSD_EVAL_DRAW = 0, 1 and 0 again, on random-init Qwen3-1.7B shapes (no weights reach the
machine; generation runs to --max-new-tokens since random weights never stop).

It checks what compare's pooling rests on: a draw > 0 samples the same problems x k with other
per-request seeds (so other texts), the same draw again gives the same samples, and the engine
accepts a derived seed; and it times each run (engine start included).

    python benchmarks/gpu_eval_draw.py [--out FILE] [--problems 8] [--k 4] [--max-new-tokens 256] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "eval_draw_h200_vllm.json"))
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--work-dir")
    ap.add_argument("--smoke", action="store_true", help="the untrained tiny model on the CPU, HF backend, seconds")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_eval import build_model

    from opsdkit.tiny import make_benchmark

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="eval-draw-"))
    model = build_model(work, smoke=args.smoke)
    backend = "hf" if args.smoke else "vllm"
    bench = work / "bench.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in make_benchmark(args.problems, seed=7)))
    result = {"model": "untrained tiny (CPU smoke)" if args.smoke else "random-init Qwen3-1.7B shapes, bf16, tiny tokenizer",
              "backend": backend,
              "problems": args.problems, "k": args.k, "max_new_tokens": args.max_new_tokens, "runs": {},
              "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    samples = {}
    for name, draw in (("draw0", 0), ("draw1", 1), ("draw0-again", 0)):
        out = work / name
        cmd = [sys.executable, "-m", "eval", "--model", model, "--benchmark", str(bench), "--k", str(args.k),
               "--num-problems", str(args.problems), "--max-new-tokens", str(args.max_new_tokens),
               "--backend", backend, "--output-dir", str(out)]
        env = {**os.environ, "OPSD_EVAL_DRAW": str(draw)}
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        wall = round(time.time() - t0, 1)
        tail = (proc.stdout + proc.stderr)[-1500:]
        if proc.returncode != 0:
            result["runs"][name] = {"error": f"exit {proc.returncode}", "tail": tail}
            print(f"{name}: FAILED exit {proc.returncode}\n{tail}", flush=True)
            break
        recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        samples[name] = {(r["id"], r["sample"]): (r["seed"], r["text"], r["n_tokens"], r["finish_reason"]) for r in recs}
        settings = json.loads((out / "settings.json").read_text())
        result["runs"][name] = {"draw": draw, "wall_seconds": wall, "items": len(recs), "seed": settings.get("seed"),
                                "settings_draw": settings.get("draw"), "final": [x for x in tail.splitlines()
                                                                                 if x.startswith("FINAL")][-1:]}
        print(f"{name}: {len(recs)} samples in {wall} s, seed {settings.get('seed')}", flush=True)
    if len(samples) == 3:
        a, b, c = samples["draw0"], samples["draw1"], samples["draw0-again"]
        same_text = [key for key in a if a[key][1] == b[key][1]]
        result["checks"] = {
            "same_items": set(a) == set(b) == set(c),
            "draw1_seeds_all_differ": all(a[key][0] != b[key][0] for key in a),
            "draw1_texts_differ": len(a) - len(same_text),
            # a text both draws sampled alike: how long it was and why it ended (an early stop of the
            # random model's own, or the same tokens under other seeds)
            "draw1_same_texts": [{"n_tokens": a[key][2], "finish_reason": a[key][3]} for key in same_text],
            "draw0_again_identical": sum(a[key] == c[key] for key in a),
            "items": len(a),
        }
        print(json.dumps(result["checks"]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result.get("checks", {}).get("draw1_seeds_all_differ") else 1


if __name__ == "__main__":
    raise SystemExit(main())
