"""The main job on real GPUs, driven by opsdctl: one chain with the real code paths.

    python benchmarks/gpu_main_job.py --out-dir DIR            # every visible GPU (NVML gate on)
    python benchmarks/gpu_main_job.py --smoke --out-dir DIR    # CPU, tiny shapes: checks the script

What it runs (weights cannot be downloaded, so the model is a randomly initialised Qwen3-1.7B of
the real shapes, with the tiny tokenizer; speed and memory depend on shapes, not on weights):
1. a workspace whose stages are the default qwen3-1.7b commands: `accelerate launch
   --num_processes {num_gpus} -m trainer` (per-device batch 4, a short step budget) and
   `python -m eval --gpus {gpus}` (one eval worker per granted GPU), with `[gpus] devices = "all"`
   and the real NVML gate;
2. `opsdctl queue` + `opsdctl worker --drain`, sampling every GPU's utilisation and memory with
   NVML meanwhile;
3. the same evaluation again on one GPU, to check that per-sample results do not depend on how
   many GPUs ran them.
It writes to --out-dir: main_job.json (figures), gpu_timeline.png (utilisation and memory per GPU
with the stage boundaries), main_job.log (the worker, train and eval logs, trimmed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEPS = 2  # optimizer steps: each is one 4-row rollout per process
COMPLETION = 256  # tokens per rollout (random weights never stop early)
EVAL_PROBLEMS, EVAL_K, EVAL_TOKENS = 6, 2, 128


def sh(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, text=True, capture_output=True, **kw)


def opsdctl(ws: Path, *args, check=True) -> subprocess.CompletedProcess:
    proc = sh([sys.executable, "-m", "opsdctl.cli", "--config", str(ws / "opsdctl.toml"), *args], cwd=ws)
    if check and proc.returncode != 0:
        raise SystemExit(f"opsdctl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def build_assets(work: Path, smoke: bool) -> tuple[Path, Path, Path]:
    """Model dir (random weights, tiny tokenizer), training rows and a benchmark file."""
    import torch

    from opsdkit.shapes import save_random_qwen3
    from opsdkit.tiny import build_untrained_tiny, make_benchmark, make_rows

    tiny = build_untrained_tiny(work / "tiny-untrained")
    if smoke:
        model = tiny
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tiny)
        model = Path(save_random_qwen3(work / "qwen3-1.7b-random", tokenizer=tok, dtype=torch.bfloat16))
    train = work / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in make_rows(256, seed=1)))
    bench = work / "bench.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in make_benchmark(EVAL_PROBLEMS, seed=7)))
    return model, train, bench


def write_workspace(ws: Path, model: Path, train: Path, bench: Path, smoke: bool) -> None:
    from opsdctl.config import starter_stage_commands

    ws.mkdir(parents=True, exist_ok=True)
    (ws / "recipes").mkdir(exist_ok=True)
    completion = 16 if smoke else COMPLETION
    (ws / "recipes" / "short.toml").write_text(textwrap.dedent(f"""\
        name = "short"
        extends = "{REPO / 'recipes' / 'baseline.toml'}"
        description = "the released recipe with {completion}-token rollouts (a short GPU check)"
        [hparams]
        max_completion_length = {completion}
        """))
    cmds = starter_stage_commands("tiny" if smoke else "qwen3-1.7b")
    eval_tokens = 16 if smoke else EVAL_TOKENS
    train_cmd = (cmds["train"] + f" --model {model} --dataset {train} --max-steps {STEPS}"
                 " --per-device-batch 4 --grad-accum 1 --save-steps 1000")
    eval_cmd = (cmds["eval"] + f" --model {model} --benchmark {bench} --k {EVAL_K}"
                f" --max-new-tokens {eval_tokens}")
    devices = "[]" if smoke else '"all"'
    (ws / "opsdctl.toml").write_text(textwrap.dedent(f"""\
        profile = "{'tiny' if smoke else 'qwen3-1.7b'}"
        db = "sqlite:///runs.db"
        runs_dir = "runs"
        code_dir = "{REPO}"
        snapshot_code = false

        [budget]
        hours = 1
        margin_minutes = 1

        [gpus]
        devices = {devices}
        min_free_mib = 20000
        gpu_wait_minutes = 2

        [stages.train]
        command = {json.dumps(train_cmd)}

        [stages.eval]
        command = {json.dumps(eval_cmd)}

        [baseline]
        variant = "short"
        """))


class NvmlSampler(threading.Thread):
    """Every GPU's utilisation (%) and memory used (MiB), every `period` seconds."""

    def __init__(self, period: float = 0.5):
        super().__init__(daemon=True)
        self.period, self.samples, self.stop = period, [], threading.Event()

    def run(self) -> None:
        try:
            import pynvml
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        while not self.stop.is_set():
            row = {"t": time.time(), "util": [], "mem_mib": []}
            for h in handles:
                row["util"].append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                row["mem_mib"].append(pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20)
            self.samples.append(row)
            self.stop.wait(self.period)
        pynvml.nvmlShutdown()


def stage_times(status: dict) -> dict:
    chain = next(c for c in status["chains"] if c["state"] != "queued")
    from datetime import datetime

    out = {"chain_state": chain["state"], "score": chain.get("score"), "reason": chain.get("reason")}
    for st in chain.get("stages", []):
        out[st["name"]] = {k: st.get(k) for k in ("started_at", "finished_at", "seconds", "gpus", "estimate_seconds")}
        for k in ("started_at", "finished_at"):
            if st.get(k):
                out[st["name"]][k + "_epoch"] = datetime.fromisoformat(st[k]).timestamp()
    return out


def idle_gap(samples: list[dict], train_end: float, eval_start: float, busy: int = 10) -> dict:
    """Between the train stage's end and the eval's first busy sample: how long no GPU was busy."""
    after = [s for s in samples if s["t"] >= train_end - 1.0]
    last_train_busy = max((s["t"] for s in after if s["t"] <= eval_start and max(s["util"]) >= busy), default=train_end)
    first_eval_busy = min((s["t"] for s in after if s["t"] >= eval_start and max(s["util"]) >= busy), default=None)
    return {"stage_gap_seconds": round(eval_start - train_end, 2),
            "gpu_idle_seconds": None if first_eval_busy is None else round(first_eval_busy - last_train_busy, 2),
            "note": "stage gap = eval stage start - train stage end (release wait, gate, process start); "
                    "GPU idle = last busy sample of training to first busy sample of evaluation (includes "
                    "the eval's model loading)"}


def plot_timeline(samples: list[dict], times: dict, path: Path) -> None:
    if not samples:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = samples[0]["t"]
    ts = [s["t"] - t0 for s in samples]
    n = len(samples[0]["util"])
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    for g in range(n):
        a1.plot(ts, [s["util"][g] for s in samples], label=f"GPU {g}", lw=1)
        a2.plot(ts, [s["mem_mib"][g] / 1024 for s in samples], label=f"GPU {g}", lw=1)
    for name, color in (("train", "tab:blue"), ("eval", "tab:green")):
        st = times.get(name, {})
        if st.get("started_at_epoch") and st.get("finished_at_epoch"):
            for ax in (a1, a2):
                ax.axvspan(st["started_at_epoch"] - t0, st["finished_at_epoch"] - t0, color=color, alpha=0.08)
            a1.text(st["started_at_epoch"] - t0, 102, f"{name} stage", color=color, fontsize=9)
    a1.set_ylabel("utilisation %")
    a1.set_ylim(0, 110)
    a2.set_ylabel("memory used (GiB)")
    a2.set_xlabel("seconds")
    a1.legend(loc="upper right", fontsize=8)
    a1.set_title("opsdctl chain on random-init Qwen3-1.7B shapes: train (accelerate) -> eval (one worker per GPU)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare_samples(a: Path, b: Path) -> dict:
    def load(p):
        rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
        return {(r["id"], r["sample"]): (r["text"], r["n_tokens"]) for r in rows}

    x, y = load(a), load(b)
    same = sum(x[k] == y.get(k) for k in x)
    return {"items": len(x), "identical": same, "all_identical": same == len(x) == len(y)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/opsdctl-gpu-job"))
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, no NVML: checks the script")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    work, ws = args.work, args.work / "ws"
    t_all = time.time()
    model, train, bench = build_assets(work, args.smoke)
    write_workspace(ws, model, train, bench, args.smoke)
    print(f"assets ready in {time.time() - t_all:.0f} s: {model}", flush=True)

    gpus = json.loads(opsdctl(ws, "gpus", "--json", check=False).stdout or "{}")
    opsdctl(ws, "queue", "short")
    sampler = NvmlSampler()
    sampler.start()
    t0 = time.time()
    worker = sh([sys.executable, "-m", "opsdctl.cli", "--config", str(ws / "opsdctl.toml"), "worker", "--drain"], cwd=ws)
    wall = time.time() - t0
    sampler.stop.set()
    sampler.join(5)
    status = json.loads(opsdctl(ws, "status", "--json", "--all").stdout)
    times = stage_times(status)
    print(f"chain {times['chain_state']} in {wall:.0f} s, score {times['score']}", flush=True)

    run = ws / "runs" / "1"
    train_result = json.loads((run / "train" / "train_result.json").read_text()) if (run / "train" / "train_result.json").exists() else {}
    metrics = [json.loads(x) for x in (run / "train" / "metrics.jsonl").read_text().splitlines()] if (run / "train" / "metrics.jsonl").exists() else []
    eval_result = json.loads((run / "eval" / "result.json").read_text()) if (run / "eval" / "result.json").exists() else {}

    # the same items on one GPU (or one CPU worker): per-sample results must not change
    one = work / "eval-1gpu"
    gpu_arg = "" if args.smoke else "0"
    cmd = [sys.executable, "-m", "eval", "--profile", "tiny" if args.smoke else "qwen3-1.7b", "--model", str(model),
           "--benchmark", str(bench), "--k", str(EVAL_K), "--max-new-tokens", str(16 if args.smoke else EVAL_TOKENS),
           "--adapter", str(run / "train" / "checkpoint-final"), "--output-dir", str(one), "--gpus", gpu_arg]
    t1 = time.time()
    single = sh(cmd, cwd=REPO)
    single_wall = time.time() - t1
    same = compare_samples(run / "eval" / "samples.jsonl", one / "samples.jsonl") if single.returncode == 0 else {
        "error": single.stderr[-2000:]}

    gap = idle_gap(sampler.samples, times["train"]["finished_at_epoch"], times["eval"]["started_at_epoch"]) \
        if "train" in times and "eval" in times and times["train"].get("finished_at_epoch") and times["eval"].get("started_at_epoch") else {}
    peak = {}
    for s in sampler.samples:
        for g, m in enumerate(s["mem_mib"]):
            peak[g] = max(peak.get(g, 0.0), m)
    result = {
        "device": gpus.get("gpus") if isinstance(gpus, dict) else gpus,
        "setting": {"model": "random-init Qwen3-1.7B shapes (bf16)", "steps": STEPS, "per_device_batch": 4,
                    "grad_accum": 1, "completion_tokens": 16 if args.smoke else COMPLETION,
                    "eval": {"problems": EVAL_PROBLEMS, "k": EVAL_K, "max_new_tokens": 16 if args.smoke else EVAL_TOKENS}},
        "chain": times, "worker_wall_seconds": round(wall, 1), "worker_exit": worker.returncode,
        "train": {"result": train_result, "steps": metrics},
        "eval": {k: eval_result.get(k) for k in ("avg_at_k", "seconds", "generation_seconds", "samples_per_second",
                                                 "imbalance", "workers", "n_samples", "dispatch")},
        "gpu_peak_used_mib": {str(g): round(m) for g, m in peak.items()},
        "gaps": gap,
        "eval_one_gpu": {"wall_seconds": round(single_wall, 1), "exit": single.returncode, **same},
    }
    (args.out_dir / "main_job.json").write_text(json.dumps(result, indent=1, default=str))
    plot_timeline(sampler.samples, times, args.out_dir / "gpu_timeline.png")
    with open(args.out_dir / "main_job.log", "w") as log:
        log.write(f"== worker (exit {worker.returncode}) ==\n{worker.stdout[-6000:]}\n{worker.stderr[-3000:]}\n")
        for stage in ("train", "eval"):
            p = run / f"{stage}.log"
            if p.exists():
                text = p.read_text(errors="replace")
                log.write(f"== {stage}.log (last 12000 chars) ==\n{text[-12000:]}\n")
        log.write(f"== eval on one GPU (exit {single.returncode}) ==\n{single.stdout[-2000:]}\n{single.stderr[-3000:]}\n")
    print(json.dumps({k: result[k] for k in ("worker_wall_seconds", "gaps", "gpu_peak_used_mib", "eval_one_gpu")},
                     indent=1, default=str))
    print(f"total {time.time() - t_all:.0f} s; results in {args.out_dir}", flush=True)
    ok = times["chain_state"] == "succeeded" and same.get("all_identical")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
