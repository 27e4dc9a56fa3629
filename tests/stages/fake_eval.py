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
The recipe's extra method knob `fake_mode` (OPSD_FAKE_MODE): "badresult" (as FAKE_BAD_RESULT=1),
"silent" (neither result.json nor a FINAL line).
Usage: fake_eval.py CHECKPOINT [--output-dir DIR] [--final-only]
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
args = p.parse_args()
final_only = args.final_only or os.environ.get("FINAL_ONLY") == "1"
mode = os.environ.get("OPSD_FAKE_MODE", "")
if mode == "silent":
    print("evaluated, but forgot to say how it went")
    sys.exit(0)

if not os.path.isdir(args.checkpoint):
    print(f"no checkpoint at {args.checkpoint}", file=sys.stderr)
    sys.exit(4)
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

n = int(os.environ.get("FAKE_PROBLEMS", "6"))
k = int(os.environ.get("FAKE_K", "4"))
bonus = 0.15 if ckpt.get("clip_mode") == "token" else 0.0
rng = random.Random(1000 + int(ckpt.get("seed", 0)))
problems = []
for i in range(n):
    time.sleep(float(os.environ.get("FAKE_EVAL_SECONDS", "0.01")))
    p_true = min(1.0, 0.3 + 0.1 * (i % 4) + bonus)
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
    doc = {"schema": 1, "k": k, "avg_at_k": avg, "n_problems": n, "problems": problems, "partial": False,
           "seconds": 0.5}
    if os.environ.get("FAKE_BAD_RESULT") == "1" or mode == "badresult":
        doc["avg_at_k"] = "high"
    with open(os.path.join(args.output_dir, "result.json"), "w") as f:
        json.dump(doc, f)
print(f"FINAL avg@{k} accuracy: {100 * avg:.2f}% ({correct}/{n * k} solutions correct on {n} problems)", flush=True)
