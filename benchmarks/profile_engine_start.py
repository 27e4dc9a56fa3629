"""Where a warm vLLM engine start goes: the evaluator's engine, built under cProfile.

    python benchmarks/profile_engine_start.py MODEL_DIR OUT_FILE [--top 60]

Builds the engine exactly as eval/backends.py's VLLMBackend does (in this process, as our stages
run it), generates one 8-token sample, and writes the cumulative-time profile (the functions
that take the longest, with their callees) to OUT_FILE, plus the wall times of the import, the
engine and the first sample. Run it after an engine of the same shape has started once on the
machine, so the compile cache is warm: what is left is the start every chain pays.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("out_file", type=Path)
    ap.add_argument("--top", type=int, default=60)
    args = ap.parse_args()
    from eval.backends import backend_env

    os.environ.update(backend_env("vllm", {"batch_invariant": False}))
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams

    t1 = time.perf_counter()
    prof = cProfile.Profile()
    prof.enable()
    llm = LLM(model=args.model_dir, tokenizer=args.model_dir, tensor_parallel_size=1, dtype="bfloat16", seed=0,
              gpu_memory_utilization=0.85, max_num_seqs=64, generation_config="vllm")
    t2 = time.perf_counter()
    llm.generate(["1 + 1 ="], SamplingParams(max_tokens=8, temperature=0.6, ignore_eos=True), use_tqdm=False)
    prof.disable()
    t3 = time.perf_counter()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).sort_stats("cumulative")
    stats.print_stats(args.top)
    buf.write("\n---- by own time ----\n")
    stats.sort_stats("tottime").print_stats(30)
    head = (f"vllm import {t1 - t0:.2f} s; engine {t2 - t1:.2f} s (under cProfile); first sample "
            f"{t3 - t2:.2f} s\n\n")
    args.out_file.write_text(head + buf.getvalue())
    print(head.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
