"""Emulates an eval stage for the control-plane tests.

Reads the checkpoint the train stage left, prints vLLM-style `Processed prompts` progress, and
writes result.json (schema 1, per-problem counts) or, with --final-only (or FINAL_ONLY=1), only
prints the `FINAL avg@k accuracy: ...` line, like a user's dev_eval.sh. The score depends on the
seed and on OPSD_CLIP_MODE so comparisons have something to rank.
  FAKE_PROBLEMS (default 6), FAKE_K (default 4), FAKE_EVAL_SECONDS (default 0.01 per problem),
  FAKE_CHILD=1 (a sleeping child, pid in <out>/child.pid; FAKE_IGNORE_TERM=1: it ignores SIGTERM),
  FAKE_HANG=1 (sleep forever after start),
  FAKE_BAD_RESULT=1 (write a malformed result.json),
  FAKE_LOOK=1 (at half the problems, a progress.jsonl record with per-problem counts, as at a look k).
Partial evaluations, as the workspace's dev_eval.sh and our evaluator take them: --num-problems N /
--k K, else NUM_PROBLEMS / VAL_N from the environment (the script prints `NUM_PROBLEMS=.. VAL_N=..`
when it uses them), else FAKE_PROBLEMS / FAKE_K; FAKE_IGNORE_PARTIAL=1 ignores all of them (a script
that cannot run partial evals). CHECKPOINT may be `base`: the untrained base model (a lower score). OPSD_EVAL_DRAW=N > 0 (a re-eval)
draws other samples of the same checkpoint, as our evaluator does.
FAKE_GPU_FILE / FAKE_EVAL_GPU_MIB / FAKE_GPU_UTIL: GPU use as NVML shows it (tests/stages/fake_gpu_file.py).
The recipe's extra method knob `fake_mode` (OPSD_FAKE_MODE): "badresult" (as FAKE_BAD_RESULT=1),
"silent" (neither result.json nor a FINAL line).
Started ahead of its turn (OPSD_GO_FD, `[stages.eval] prestart`), it honours the hold as a user's
script would: it writes <out>/held.json {"pid", "pgid", "at"}, reads one byte from the pipe, and on `1`
adds "go_at" and runs; on end of file it writes <out>/nogo and exits 1, touching nothing else.
Usage: fake_eval.py CHECKPOINT|base [--output-dir DIR] [--final-only] [--num-problems N] [--k K]
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("checkpoint")
p.add_argument("--output-dir")
p.add_argument("--final-only", action="store_true")
p.add_argument("--num-problems", type=int)
p.add_argument("--k", type=int)
args = p.parse_args()
go_fd = os.environ.get("OPSD_GO_FD")
if go_fd:
    held_dir = args.output_dir or os.environ["OPSDCTL_STAGE_DIR"]
    os.makedirs(held_dir, exist_ok=True)
    held = {"pid": os.getpid(), "pgid": os.getpgid(0), "at": time.time()}
    with open(os.path.join(held_dir, "held.json"), "w") as f:
        json.dump(held, f)
    word = os.read(int(go_fd), 1)
    os.close(int(go_fd))
    if word != b"1":
        open(os.path.join(held_dir, "nogo"), "w").close()
        sys.exit(1)
    with open(os.path.join(held_dir, "held.json"), "w") as f:
        json.dump({**held, "go_at": time.time()}, f)
final_only = args.final_only or os.environ.get("FINAL_ONLY") == "1"
mode = os.environ.get("OPSD_FAKE_MODE", "")
if mode == "silent":
    print("evaluated, but forgot to say how it went")
    sys.exit(0)

if args.checkpoint == "base":
    ckpt = {"seed": 0, "clip_mode": "base"}
elif not os.path.isdir(args.checkpoint):
    print(f"no checkpoint at {args.checkpoint}", file=sys.stderr)
    sys.exit(4)
else:
    with open(os.path.join(args.checkpoint, "adapter_config.json")) as f:
        ckpt = json.load(f)

if os.environ.get("FAKE_CHILD") == "1" and args.output_dir:
    os.makedirs(args.output_dir, exist_ok=True)
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if os.environ.get("FAKE_IGNORE_TERM") == "1" else ""
    child = subprocess.Popen([sys.executable, "-c", f"import signal, time; {ignore}time.sleep(600)"])
    with open(os.path.join(args.output_dir, "child.pid"), "w") as f:
        f.write(str(child.pid))
if os.environ.get("FAKE_HANG") == "1":
    print("evaluating (hanging on purpose)", flush=True)
    time.sleep(600)

full_n = int(os.environ.get("FAKE_PROBLEMS", "6"))
full_k = int(os.environ.get("FAKE_K", "4"))
n, k = full_n, full_k
if os.environ.get("FAKE_IGNORE_PARTIAL") != "1":
    env_n, env_k = os.environ.get("NUM_PROBLEMS"), os.environ.get("VAL_N")
    if env_n or env_k:
        print(f"NUM_PROBLEMS={env_n or ''} VAL_N={env_k or ''}", flush=True)
    n = args.num_problems or int(env_n or full_n)
    k = args.k or int(env_k or full_k)
bonus = {"token": 0.15, "base": -0.2}.get(ckpt.get("clip_mode"), 0.0)
# OPSD_EVAL_DRAW (a re-eval's fresh samples): another draw of the same checkpoint's samples
rng = random.Random(1000 + int(ckpt.get("seed", 0)) + 7919 * int(os.environ.get("OPSD_EVAL_DRAW") or 0))
problems = []
gpu_file = os.environ.get("FAKE_GPU_FILE")
if gpu_file:
    import fake_gpu_file

    fake_gpu_file.use(gpu_file, int(os.environ.get("FAKE_EVAL_GPU_MIB", "500")), int(os.environ.get("FAKE_GPU_UTIL", "80")))
for i in range(n):
    time.sleep(float(os.environ.get("FAKE_EVAL_SECONDS", "0.01")))
    p_true = max(0.0, min(1.0, 0.3 + 0.1 * (i % 4) + bonus))
    correct = sum(rng.random() < p_true for _ in range(k))
    problems.append({"id": f"P-{i + 1}", "correct": correct, "samples": k, "mean_tokens": 100.0 + i})
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        with open(os.path.join(args.output_dir, "progress.jsonl"), "a") as prog:
            prog.write(json.dumps({"done": i + 1, "total": n}) + "\n")
            if os.environ.get("FAKE_LOOK") == "1" and i + 1 == n // 2:
                prog.write(json.dumps({"done": i + 1, "total": n, "look_k": k, "problems": problems}) + "\n")
    pct = int(100 * (i + 1) / n)
    print(f"\rProcessed prompts: {pct:3d}%|{'#' * (pct // 10):<10}| {i + 1}/{n} [00:0{i}<00:01, 1.00it/s]",
          end="", flush=True)
print(flush=True)
correct = sum(p["correct"] for p in problems)
avg = correct / (n * k)
if args.output_dir and not final_only:
    os.makedirs(args.output_dir, exist_ok=True)
    doc = {"schema": 1, "k": k, "avg_at_k": avg, "n_problems": n, "problems": problems,
           "partial": n < full_n or k < full_k,
           "seconds": 0.5}
    if os.environ.get("FAKE_BAD_RESULT") == "1" or mode == "badresult":
        doc["avg_at_k"] = "high"
    with open(os.path.join(args.output_dir, "result.json"), "w") as f:
        json.dump(doc, f)
if gpu_file:
    fake_gpu_file.release(gpu_file)
print(f"FINAL avg@{k} accuracy: {100 * avg:.2f}% ({correct}/{n * k} solutions correct on {n} problems)", flush=True)
