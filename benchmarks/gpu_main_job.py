"""The main job on real GPUs, driven by opsdctl: one chain with the real code paths.

    python benchmarks/gpu_main_job.py --out-dir DIR            # every visible GPU (NVML gate on)
    python benchmarks/gpu_main_job.py --smoke --out-dir DIR    # CPU, tiny shapes: checks the script

What it runs (weights cannot be downloaded, so the model is a randomly initialised Qwen3-1.7B of
the real shapes, with the tiny tokenizer; speed and memory depend on shapes, not on weights):
1. a workspace whose stages are the default qwen3-1.7b commands: `accelerate launch
   --num_processes {num_gpus} -m trainer` (per-device batch 4, a short step budget; vLLM
   colocated rollouts where vLLM is installed) and `python -m eval --gpus {gpus}` (one eval
   worker per granted GPU, vLLM where installed), with `[gpus] devices = "all"` and the real
   NVML gate; the stages share one vLLM compile cache (VLLM_CACHE_ROOT, inherited if set);
2. `opsdctl queue` + `opsdctl worker --drain`, sampling every GPU's utilisation and memory with
   NVML meanwhile, and watching the stage files for the train stage's last step and the eval's
   first finished sample: the GPU idle time between them is the start-up cost a chain pays;
3. the same evaluation again on one GPU (with vLLM: engines started from the merged model dir,
   --merged-weights dir, against the chain's push path), to check that per-sample results do
   not depend on how many GPUs ran them or on how the merged weights reached the engine.
It writes to --out-dir: main_job.json (figures), gpu_timeline.png (utilisation and memory per GPU
with the stage boundaries and the idle gap), main_job.log (the worker, train and eval logs, trimmed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEPS = 2  # optimizer steps: each is one 4-row rollout per process
COMPLETION = 1024  # tokens per rollout (random weights never stop early); bench_trainer's, so its compile cache serves
EVAL_PROBLEMS, EVAL_K, EVAL_TOKENS = 6, 2, 128
VLLM_TIMING = re.compile(r"(torch\.compile took|torch\.compile takes|Compil\w+ .*took|Graph capturing finished|"
                         r"init engine.*took|Model loading took|Loading weights took|Dynamo bytecode transform|"
                         r"Directly load the compiled graph|ready [0-9.]+ s after start|adapter merged in|"
                         r"generation done - elapsed)", re.I)


def sh(args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, text=True, capture_output=True, **kw)


def opsdctl(ws: Path, *args, check=True) -> subprocess.CompletedProcess:
    proc = sh([sys.executable, "-m", "opsdctl.cli", "--config", str(ws / "opsdctl.toml"), *args], cwd=ws)
    if check and proc.returncode != 0:
        raise SystemExit(f"opsdctl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def build_assets(work: Path, smoke: bool, model_dir: Path | None = None) -> tuple[Path, Path, Path]:
    """Model dir (random weights, tiny tokenizer), training rows and a benchmark file."""
    import torch

    from opsdkit.shapes import cached_random_qwen3
    from opsdkit.tiny import build_untrained_tiny, make_benchmark, make_rows

    tiny = build_untrained_tiny(work / "tiny-untrained")
    if smoke:
        model = tiny
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tiny)
        model = Path(cached_random_qwen3(model_dir or work / "qwen3-1.7b-random", tokenizer=tok,
                                         dtype=torch.bfloat16, device="cuda"))
        torch.cuda.empty_cache()
    train = work / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in make_rows(256, seed=1)))
    bench = work / "bench.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in make_benchmark(EVAL_PROBLEMS, seed=7)))
    return model, train, bench


def write_workspace(ws: Path, model: Path, train: Path, bench: Path, smoke: bool, prestart: bool = True) -> None:
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
    eval_cmd = (cmds["eval"] + f" --model {model} --benchmark {bench} --num-problems {EVAL_PROBLEMS} --k {EVAL_K}"
                f" --max-new-tokens {eval_tokens}")
    devices = "[]" if smoke else '"all"'
    (ws / "opsdctl.toml").write_text(textwrap.dedent(f"""\
        profile = "{'tiny' if smoke else 'qwen3-1.7b'}"
        db = "sqlite:///runs.db"
        runs_dir = "runs"
        code_dir = "{REPO}"
        snapshot_code = false

        [budget]
        # a session's budget: a first chain, with no history, is admitted on the profile's full-size
        # estimate (about 2 h on one GPU), so a 1-hour budget skipped this short chain
        hours = 6
        margin_minutes = 1

        [gpus]
        devices = {devices}
        min_free_mib = 20000
        gpu_wait_minutes = 2

        [stages.train]
        command = {json.dumps(train_cmd)}

        [stages.eval]
        command = {json.dumps(eval_cmd)}
        prestart = {'true' if prestart else 'false'}

        [baseline]
        variant = "short"
        """))


class NvmlSampler(threading.Thread):
    """Every GPU's utilisation (%) and memory used (MiB), every `period` seconds; and the first
    time each watched file holds at least n lines (the train stage's last step, the eval's first
    sample)."""

    def __init__(self, period: float = 0.25, watch: dict[str, tuple[Path, int]] | None = None):
        super().__init__(daemon=True)
        self.period, self.samples, self.stop = period, [], threading.Event()
        self.watch, self.seen = dict(watch or {}), {}

    def _check_files(self) -> None:
        for name, (path, n) in self.watch.items():
            if name in self.seen:
                continue
            try:
                with open(path, "rb") as f:
                    if sum(1 for line in f if line.strip()) >= n:
                        self.seen[name] = time.time()
            except OSError:
                pass

    def run(self) -> None:
        handles = []
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:
            pynvml = None
        while not self.stop.is_set():
            self._check_files()
            if handles:
                row = {"t": time.time(), "util": [], "mem_mib": []}
                for h in handles:
                    row["util"].append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                    row["mem_mib"].append(pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20)
                self.samples.append(row)
            self.stop.wait(self.period)
        self._check_files()
        if handles:
            pynvml.nvmlShutdown()


def stage_times(status: dict, chain_id: int) -> dict:
    chain = next(c for c in status["chains"] if c["chain_id"] == chain_id)
    from datetime import datetime

    out = {"chain_state": chain["state"], "score": chain.get("score"), "reason": chain.get("reason")}
    for st in chain.get("stages", []):
        out[st["name"]] = {k: st.get(k) for k in ("started_at", "finished_at", "seconds", "gpus", "estimate_seconds")}
        for k in ("started_at", "finished_at"):
            if st.get(k):
                out[st["name"]][k + "_epoch"] = datetime.fromisoformat(st[k]).timestamp()
    return out


def idle_gap(seen: dict, times: dict, samples: list[dict], busy: int = 10) -> dict:
    """From the train stage's last step to the eval's first finished sample, split where the
    time goes: the trainer's exit (checkpoint, engine teardown), the worker's hand-over (release
    wait, gate, spawn), and the eval's own start (imports, engine start, weights) to its first
    sample. Plus the stretch with no GPU busy at all, from the NVML samples."""
    last_step, first_sample = seen.get("last_step"), seen.get("first_sample")
    train_end = times.get("train", {}).get("finished_at_epoch")
    eval_start = times.get("eval", {}).get("started_at_epoch")
    out = {"last_step_to_first_eval_sample_seconds": round(first_sample - last_step, 2)
           if last_step and first_sample else None}
    if last_step and train_end:
        out["train_exit_seconds"] = round(train_end - last_step, 2)
    if train_end and eval_start:
        out["stage_gap_seconds"] = round(eval_start - train_end, 2)
    if eval_start and first_sample:
        out["eval_start_to_first_sample_seconds"] = round(first_sample - eval_start, 2)
    if last_step and first_sample and samples:
        window = [x for x in samples if last_step <= x["t"] <= first_sample]
        idle = sum(1 for x in window if max(x["util"]) < busy)
        out["gpu_idle_share_in_gap"] = round(idle / len(window), 3) if window else None
    out["note"] = ("stage times have 1 s resolution (the store's); last step = metrics.jsonl reaching the last "
                   "step's line, first sample = the eval's samples.jsonl getting its first line (a whole "
                   f"{EVAL_TOKENS}-token sample, a fraction of a second on vLLM)")
    return out


def timing_lines(text: str, limit: int = 40) -> list[str]:
    """The start-up lines of vLLM and of our workloads (compile, graph capture, load, ready)."""
    return [line.strip()[-300:] for line in text.splitlines() if VLLM_TIMING.search(line)][:limit]


def plot_timeline(samples: list[dict], times: dict, path: Path, seen: dict | None = None, title: str = "") -> None:
    seen = seen or {}
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
    for name, color in (("last_step", "tab:red"), ("first_sample", "tab:purple")):
        if seen.get(name):
            for ax in (a1, a2):
                ax.axvline(seen[name] - t0, color=color, lw=1, ls="--")
            a1.text(seen[name] - t0, 92, {"last_step": " last train step", "first_sample": " first eval sample"}[name],
                    color=color, fontsize=8)
    a1.set_ylabel("utilisation %")
    a1.set_ylim(0, 110)
    a2.set_ylabel("memory used (GiB)")
    a2.set_xlabel("seconds")
    a1.legend(loc="upper right", fontsize=8)
    a1.set_title(title or "opsdctl chain on random-init Qwen3-1.7B shapes: train (accelerate) -> eval (one worker per GPU)",
                 fontsize=9)
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
    ap.add_argument("--model-dir", type=Path, help="random model dir to reuse (built there if missing)")
    ap.add_argument("--no-recheck", action="store_true", help="skip the second evaluation on one GPU")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, no NVML: checks the script")
    ap.add_argument("--chains", type=int, default=1, help="chains to run one after another; the figures are the "
                    "last one's (the first warms the compile caches), every chain's gap is listed")
    ap.add_argument("--prestart", choices=("on", "off"), default="on",
                    help="[stages.eval] prestart: the eval imports while training runs (default on)")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    work, ws = args.work, args.work / "ws"
    import shutil

    shutil.rmtree(ws, ignore_errors=True)  # a fresh store: the chain is chain 1
    t_all = time.time()
    model, train, bench = build_assets(work, args.smoke, args.model_dir)
    write_workspace(ws, model, train, bench, args.smoke, prestart=args.prestart == "on")
    print(f"assets ready in {time.time() - t_all:.0f} s: {model}; VLLM_CACHE_ROOT="
          f"{os.environ.get('VLLM_CACHE_ROOT', '(the runs_dir default)')}", flush=True)

    gpus = json.loads(opsdctl(ws, "gpus", "--json", check=False).stdout or "{}")
    opsdctl(ws, "queue", "short", "--repeats", str(args.chains))
    n = args.chains
    run = ws / "runs" / str(n)
    watch = {}
    for i in range(1, n + 1):
        watch[f"last_step_{i}"] = (ws / "runs" / str(i) / "train" / "metrics.jsonl", STEPS)
        watch[f"first_sample_{i}"] = (ws / "runs" / str(i) / "eval" / "samples.jsonl", 1)
    sampler = NvmlSampler(watch=watch)
    sampler.start()
    t0 = time.time()
    worker = sh([sys.executable, "-m", "opsdctl.cli", "--config", str(ws / "opsdctl.toml"), "worker", "--drain"], cwd=ws)
    wall = time.time() - t0
    sampler.stop.set()
    sampler.join(5)
    status = json.loads(opsdctl(ws, "status", "--json", "--all").stdout)
    times = stage_times(status, n)
    print(f"{n} chain(s), the last {times['chain_state']}, in {wall:.0f} s, score {times['score']}", flush=True)

    train_result = json.loads((run / "train" / "train_result.json").read_text()) if (run / "train" / "train_result.json").exists() else {}
    metrics = [json.loads(x) for x in (run / "train" / "metrics.jsonl").read_text().splitlines()] if (run / "train" / "metrics.jsonl").exists() else []
    eval_result = json.loads((run / "eval" / "result.json").read_text()) if (run / "eval" / "result.json").exists() else {}
    logs = {stage: (run / f"{stage}.log").read_text(errors="replace") if (run / f"{stage}.log").exists() else ""
            for stage in ("train", "eval")}

    # the same items on one GPU (or one CPU worker): per-sample results must not change, nor
    # with the merged weights read from a model dir instead of pushed into a started engine
    same, single, single_wall = {"skipped": True}, None, 0.0
    if not args.no_recheck and (run / "eval" / "samples.jsonl").exists():
        one = work / "eval-1gpu"
        shutil.rmtree(one, ignore_errors=True)
        gpu_arg = "" if args.smoke else "0"
        cmd = [sys.executable, "-m", "eval", "--profile", "tiny" if args.smoke else "qwen3-1.7b", "--model", str(model),
               "--benchmark", str(bench), "--k", str(EVAL_K), "--max-new-tokens", str(16 if args.smoke else EVAL_TOKENS),
               "--adapter", str(run / "train" / "checkpoint-final"), "--output-dir", str(one), "--gpus", gpu_arg,
               "--merged-weights", "dir"]
        t1 = time.time()
        single = sh(cmd, cwd=REPO)
        single_wall = time.time() - t1
        same = compare_samples(run / "eval" / "samples.jsonl", one / "samples.jsonl") if single.returncode == 0 else {
            "error": single.stderr[-2000:]}
        same["merged_weights"] = "chain: push (default) vs this run: dir"

    def seen_of(i: int) -> dict:
        return {"last_step": sampler.seen.get(f"last_step_{i}"), "first_sample": sampler.seen.get(f"first_sample_{i}")}

    gaps = {str(i): idle_gap(seen_of(i), stage_times(status, i), sampler.samples) for i in range(1, n + 1)}
    gap = gaps[str(n)]
    peak = {}
    for x in sampler.samples:
        for g, m in enumerate(x["mem_mib"]):
            peak[g] = max(peak.get(g, 0.0), m)
    result = {
        "device": gpus.get("gpus") if isinstance(gpus, dict) else gpus,
        "vllm_cache_root": os.environ.get("VLLM_CACHE_ROOT"),
        "setting": {"model": "random-init Qwen3-1.7B shapes (bf16)", "steps": STEPS, "per_device_batch": 4,
                    "grad_accum": 1, "completion_tokens": 16 if args.smoke else COMPLETION,
                    "eval": {"problems": EVAL_PROBLEMS, "k": EVAL_K, "max_new_tokens": 16 if args.smoke else EVAL_TOKENS}},
        "chain": times, "worker_wall_seconds": round(wall, 1), "worker_exit": worker.returncode,
        "train": {"result": train_result, "steps": metrics},
        "eval": {k: eval_result.get(k) for k in ("avg_at_k", "seconds", "generation_seconds", "samples_per_second",
                                                 "imbalance", "workers", "n_samples", "dispatch")},
        "gpu_peak_used_mib": {str(g): round(m) for g, m in peak.items()},
        "prestart": args.prestart, "chains": n,
        "gaps": gap,  # the last chain's
        "gaps_per_chain": gaps,  # chain 1 also pays the first compile of each engine
        "startup_lines": {stage: timing_lines(text) for stage, text in logs.items()},
        "eval_one_gpu": {"wall_seconds": round(single_wall, 1), "exit": single.returncode if single else None, **same},
    }
    (args.out_dir / "main_job.json").write_text(json.dumps(result, indent=1, default=str))
    try:
        plot_timeline(sampler.samples, times, args.out_dir / "gpu_timeline.png", seen_of(n),
                      title=f"opsdctl chain on {len(peak) or 'no'} GPU(s), random-init Qwen3-1.7B shapes: train "
                            f"({train_result.get('rollout_backend', '?')} rollouts) -> eval; idle gap "
                            f"{gap.get('last_step_to_first_eval_sample_seconds')} s")
    except Exception as exc:  # the figures matter more than the picture
        print(f"plot failed: {exc}", flush=True)
    with open(args.out_dir / "main_job.log", "w") as log:
        log.write(f"== worker (exit {worker.returncode}) ==\n{worker.stdout[-6000:]}\n{worker.stderr[-3000:]}\n")
        for stage, text in logs.items():
            log.write(f"== {stage}.log (last 12000 chars) ==\n{text[-12000:]}\n")
        if single is not None:
            log.write(f"== eval on one GPU (exit {single.returncode}) ==\n{single.stdout[-2000:]}\n{single.stderr[-3000:]}\n")
    print(json.dumps({k: result[k] for k in ("worker_wall_seconds", "gaps_per_chain", "gpu_peak_used_mib", "eval_one_gpu")},
                     indent=1, default=str))
    print(f"total {time.time() - t_all:.0f} s; results in {args.out_dir}", flush=True)
    ok = times["chain_state"] == "succeeded" and (same.get("all_identical") or same.get("skipped"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
