"""Emulates a train stage (our trainer or a user's script) for the control-plane tests.

Prints Hugging Face Trainer dict lines and a vLLM rollout line per step, appends progress.jsonl,
writes metrics.jsonl + train_result.json (unless FAKE_NO_FILES=1), and leaves a checkpoint
directory. Knobs come from OPSD_* variables; behaviour from FAKE_* variables:
  FAKE_STEPS (default 4), FAKE_STEP_SECONDS (default 0.01), FAKE_FAIL=1 (exit 3 after step 1),
  FAKE_CHILD=1 (start a sleeping child process first, writing its pid to <out>/child.pid;
  with FAKE_IGNORE_TERM=1 the child ignores SIGTERM, so only the KILL after the grace stops it),
  FAKE_CHECKPOINT (directory to create instead of <out>/checkpoint-final),
  FAKE_MARKER_FILE (a file whose text is copied into <checkpoint>/marker.txt: code-snapshot tests),
  FAKE_LOGGING_STEPS (default 1: a dict line every N steps, as the Trainer's logging_steps),
  FAKE_BAR=1 (the Trainer's own tqdm bar on stderr, " 37%|###7      | 37/100 [..."),
  FAKE_FLOOD (print this many extra loss dict lines at the start, as a chatty callback would),
  FAKE_HANG_AT=N (after step N, hang: a stage that stalls),
  FAKE_OPSD_LINES=1 (the released OPSD code's custom lines, two per step as from two processes:
  `[OPSD kl] step 3: mean per-token KL(T||S)=0.0979 max=1.2 frac above tau=0.353`).
GPU use as NVML shows it (tests/stages/fake_gpu_file.py): FAKE_GPU_FILE (a FakeProbe file), FAKE_GPU_MIB
(the memory it ramps up to by the last step), FAKE_GPU_UTIL (device utilisation while it runs),
FAKE_GPU_AS=device (no per-process entry: only the device's used memory grows).
The learning rate follows the recipe: constant, or a cosine decay (OPSD_LR_SCHEDULER_TYPE=cosine).
The recipe can pick a behaviour too, through the extra method knob `fake_mode` (OPSD_FAKE_MODE):
  "fail" (as FAKE_FAIL=1), "nockpt" (exit 0 without a checkpoint), "hang" (as FAKE_HANG_AT=5).
Usage: fake_train.py --output-dir DIR --seed S [--recipe FILE]
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--output-dir", default=os.environ.get("OUT_DIR"))
p.add_argument("--seed", type=int, default=int(os.environ.get("SEED", "0")))
p.add_argument("--recipe")
args = p.parse_args()
out = args.output_dir
os.makedirs(out, exist_ok=True)

steps = int(os.environ.get("FAKE_STEPS", "4"))
step_s = float(os.environ.get("FAKE_STEP_SECONDS", "0.01"))
# A chain's commands are frozen at queue time, so a test cannot shorten a re-queued chain's
# train through the config: this file's presence at start makes a "long" train short instead.
if os.environ.get("FAKE_SHORT_IF") and os.path.exists(os.environ["FAKE_SHORT_IF"]):
    steps, step_s = 8, 0.25
# FAKE_RENDEZVOUS=DIR:N: wait (up to 120 s) until N trains have started, so that a test of
# concurrency does not depend on how fast a loaded machine starts the second one.
if os.environ.get("FAKE_RENDEZVOUS"):
    meet, _, need = os.environ["FAKE_RENDEZVOUS"].rpartition(":")
    os.makedirs(meet, exist_ok=True)
    open(os.path.join(meet, str(os.getpid())), "w").close()
    deadline = time.time() + 120
    while len(os.listdir(meet)) < int(need) and time.time() < deadline:
        time.sleep(0.05)
lr = float(os.environ.get("OPSD_LEARNING_RATE", "5e-6"))
clip = os.environ.get("OPSD_CLIP_MODE", "entry")
mode = os.environ.get("OPSD_FAKE_MODE", "")

if os.environ.get("FAKE_CHILD") == "1":
    ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if os.environ.get("FAKE_IGNORE_TERM") == "1" else ""
    child = subprocess.Popen([sys.executable, "-c", f"import signal, time; {ignore}time.sleep(600)"])
    with open(os.path.join(out, "child.pid"), "w") as f:
        f.write(str(child.pid))

if args.recipe:
    with open(args.recipe) as f:
        recipe = json.load(f)
    print(f"recipe {recipe['name']} v{recipe['version']} hash {recipe['hash'][:12]}", flush=True)

print(f"training seed={args.seed} clip_mode={clip} lr={lr}", flush=True)
gpu_file = os.environ.get("FAKE_GPU_FILE")
if gpu_file:
    import fake_gpu_file

    as_device = os.environ.get("FAKE_GPU_AS") == "device"
logging_steps = int(os.environ.get("FAKE_LOGGING_STEPS", "1"))
bar = os.environ.get("FAKE_BAR") == "1"
for _ in range(int(os.environ.get("FAKE_FLOOD", "0"))):
    print(repr({"loss": 0.0, "grad_norm": 0.0, "learning_rate": lr, "epoch": 0.0}))
with open(os.path.join(out, "progress.jsonl"), "a") as prog, open(os.path.join(out, "metrics.jsonl"), "a") as met:
    for step in range(1, steps + 1):
        if gpu_file:
            fake_gpu_file.use(gpu_file, int(os.environ.get("FAKE_GPU_MIB", "1000")) * step // steps,
                              int(os.environ.get("FAKE_GPU_UTIL", "80")), as_device=as_device)
        time.sleep(step_s)
        loss = -0.002 * step / steps - 0.0001 * args.seed
        lr_now = lr
        if os.environ.get("OPSD_LR_SCHEDULER_TYPE") == "cosine":
            lr_now = lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / steps))
        if os.environ.get("FAKE_OPSD_LINES") == "1":
            for proc in (0, 1):  # KL(step) = 0.1 / step +- 0.01, frac = 0.3 +- 0.05
                print(f"[OPSD kl] step {step}: mean per-token KL(T||S)={0.1 / step + (0.01 if proc else -0.01):.4f} "
                      f"max={1.0 + step:.2f} frac above tau={0.3 + (0.05 if proc else -0.05):.3f}", flush=True)
        print(f"vLLM generation done - elapsed time: {0.5 + step * 0.01:.2f}s, prompts: 4, total tokens: 3413, "
              f"avg length: 853.2, speed: 912.6 tok/s", flush=True)
        if bar:
            pct = int(100 * step / steps)
            print(f"\r{pct:3d}%|{'#' * (pct // 10):<10}| {step}/{steps} [00:{step:02d}<00:10, 1.00s/it]",
                  end="", file=sys.stderr, flush=True)
        if step % logging_steps == 0:
            print(repr({"loss": round(loss, 6), "grad_norm": 0.0492, "learning_rate": lr_now,
                        "on_policy_loss": round(loss, 6), "epoch": round(0.01 * step, 4)}), flush=True)
        if os.environ.get("FAKE_NO_FILES") != "1":
            prog.write(json.dumps({"step": step, "max_steps": steps}) + "\n")
            prog.flush()
            met.write(json.dumps({"step": step, "loss": loss, "kl": 0.1 / step, "frac_clipped": 0.25, "learning_rate": lr_now,
                                  "rollout_seconds": 0.5, "step_seconds": step_s, "peak_mem_mib": 1000 + step}) + "\n")
            met.flush()
        if step == int(os.environ.get("FAKE_HANG_AT", "0")) or (mode == "hang" and step == 5):
            print("waiting on something that never comes", flush=True)
            time.sleep(600)
        if step == 1 and (os.environ.get("FAKE_FAIL") == "1" or mode == "fail"):
            print("Traceback (most recent call last):\nRuntimeError: CUDA out of memory (emulated)", flush=True)
            sys.exit(3)

if bar:
    print(file=sys.stderr, flush=True)
if gpu_file:
    fake_gpu_file.release(gpu_file, as_device=as_device)
runtime = round(steps * step_s, 3)
print(repr({"train_runtime": runtime, "train_samples_per_second": 3.5,
            "train_steps_per_second": round(steps / runtime, 3) if runtime else 0.0, "train_loss": -0.0079,
            "epoch": 0.27}), flush=True)
if mode == "nockpt":
    sys.exit(0)
ckpt = os.environ.get("FAKE_CHECKPOINT") or os.path.join(out, "checkpoint-final")
os.makedirs(ckpt, exist_ok=True)
with open(os.path.join(ckpt, "adapter_config.json"), "w") as f:
    json.dump({"seed": args.seed, "clip_mode": clip, "lr": lr}, f)
marker = os.environ.get("FAKE_MARKER_FILE")
if marker:
    with open(marker) as src, open(os.path.join(ckpt, "marker.txt"), "w") as dst:
        dst.write(src.read())
if os.environ.get("FAKE_NO_FILES") != "1":
    with open(os.path.join(out, "train_result.json"), "w") as f:
        json.dump({"train_loss": -0.0079, "train_runtime": steps * step_s, "global_step": steps}, f)
