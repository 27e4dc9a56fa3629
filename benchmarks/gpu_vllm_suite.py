"""Every GPU path through vLLM, measured in one lease: one driver for the device machine.

    python benchmarks/gpu_vllm_suite.py --out-dir DIR [--parts startup,trainer,eval,chain] [--budget-s 540]
    python benchmarks/gpu_vllm_suite.py --smoke --out-dir DIR      # CPU, tiny model, HF: checks the driver

Parts (each its own subprocess with a time limit, so one failure or hang loses only itself; the
results gather in WORK/results and are copied to --out-dir after every part, so a second command
on the same machine can run the parts still missing with --skip-done):
- startup: `python -m eval` on vLLM twice on a tiny workload, first with an empty compile
  cache, then with the one the first start wrote: process start to the first finished sample
  (64 tokens, a fraction of a second after the first token), the engine's own start, and
  vLLM's compile / graph-capture lines;
- trainer: benchmarks/bench_trainer.py --backend vllm (10 steps, batch 4 x accumulation 2,
  1024-token rollouts, NVML memory, H100 split, 100-step projection);
- eval: benchmarks/bench_eval.py --backend vllm (AIME-like lengths; batch invariance on/off x
  1 or 2 workers per GPU; per-sample equality);
- chain: benchmarks/gpu_main_job.py (one opsdctl chain, train -> eval, the idle gap between
  the last train step and the first eval sample, the timeline plot).
Every part shares one random model dir and one vLLM compile cache (VLLM_CACHE_ROOT under WORK),
as the stages of one opsdctl session do.

Writes to --out-dir: suite.json (every part's figures), parts.log (each part's log, trimmed),
gpu_timeline.png (the chain's timeline).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
PARTS = ("startup", "trainer", "eval", "chain")
# Seen on one H200 (docs/benchmarks.md): startup 260 s on a fresh machine (a cold engine start is 200 s),
# trainer 120 s, eval ~8 min for its four runs, chain 215 s.
NEEDS_S = {"startup": 120, "trainer": 200, "eval": 200, "chain": 150}  # skip a part with less time left
MAX_S = {"startup": 480, "trainer": 420, "eval": 900, "chain": 420}  # bench_eval keeps the runs it finished
RESERVE_S = 15  # for copying results back before the command's limit
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
LOG_TAIL = 15000


def part_env(work: Path, smoke: bool) -> dict:
    env = dict(os.environ)
    env.update(NO_MULTICAST)
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("VLLM_CACHE_ROOT", str(work / "vllm-cache"))
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if smoke:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_logged(cmd: list[str], log: Path, timeout: float, env: dict, cwd: Path = REPO) -> dict:
    t0 = time.time()
    with open(log, "ab") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n".encode())
        f.flush()
        proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            rc = "timeout"
    return {"exit": rc, "seconds": round(time.time() - t0, 1)}


def ensure_model(work: Path, env: dict, smoke: bool, log: Path) -> str:
    """One random Qwen3-1.7B-shaped model dir for every part (built on the GPU, once)."""
    if smoke:
        code = ("import sys; from pathlib import Path; from opsdkit.tiny import build_untrained_tiny; "
                "print(build_untrained_tiny(Path(sys.argv[1])))")
        dest = work / "tiny-untrained"
    else:
        code = ("import sys, torch; from pathlib import Path; from opsdkit.modeling import load_tokenizer; "
                "from opsdkit.shapes import cached_random_qwen3; from opsdkit.tiny import build_untrained_tiny; "
                "tok = load_tokenizer(str(build_untrained_tiny(Path(sys.argv[1]).parent / 'tiny-untrained'))); "
                "print(cached_random_qwen3(sys.argv[1], tokenizer=tok, dtype=torch.bfloat16, device='cuda'))")
        dest = work / "qwen3-1.7b-random"
    r = run_logged([sys.executable, "-c", code, dest], log, 300, env)
    if r["exit"] != 0:
        raise RuntimeError(f"building the model failed ({r}); see {log}")
    return str(dest)


# --- parts -----------------------------------------------------------------------------------


def startup_once(tag: str, model: str, bench: Path, work: Path, env: dict, smoke: bool, timeout: float,
                 log: Path) -> dict:
    """Process start to the first finished sample of `python -m eval`."""
    out = work / f"startup-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    cache = Path(env["VLLM_CACHE_ROOT"]) / "torch_compile_cache"
    before = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []
    cmd = [sys.executable, "-m", "eval", "--model", model, "--benchmark", bench, "--k", "3", "--num-problems", "2",
           "--max-new-tokens", "16" if smoke else "64", "--output-dir", out, "--gpus", "" if smoke else "0",
           "--backend", "hf" if smoke else "vllm"]
    t0 = time.time()
    with open(log, "ab") as f:
        f.write(f"== startup {tag} ==\n$ {' '.join(map(str, cmd))}\n".encode())
        f.flush()
        proc = subprocess.Popen([str(c) for c in cmd], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        first = None
        while proc.poll() is None and time.time() - t0 < timeout:
            if first is None and (out / "samples.jsonl").is_file() and (out / "samples.jsonl").stat().st_size > 0:
                first = time.time() - t0
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    wall = time.time() - t0
    if first is None and (out / "samples.jsonl").is_file() and (out / "samples.jsonl").stat().st_size > 0:
        first = wall
    doc = json.loads((out / "result.json").read_text()) if (out / "result.json").is_file() else {}
    after = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []
    return {"exit": proc.returncode, "wall_seconds": round(wall, 1),
            "process_start_to_first_sample_seconds": round(first, 2) if first is not None else None,
            "engine_load_seconds": [w.get("load_seconds") for w in doc.get("workers", [])],
            # the evaluator's own breakdown: parent start -> workers spawned -> engines ready, and
            # per worker interpreter / imports / vLLM import / engine (eval/worker.py, eval/backends.py)
            "startup_seconds": doc.get("startup_seconds"),
            "worker_startup_seconds": [w.get("startup_seconds") for w in doc.get("workers", [])],
            "generation_seconds": doc.get("generation_seconds"),
            "compile_cache_entries_before": len(before), "compile_cache_entries_after": len(after)}


IMPORTS = ("import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); import transformers; "
           "t2 = time.perf_counter(); {last}; t3 = time.perf_counter(); "
           "print(round(t1 - t0, 2), round(t2 - t1, 2), round(t3 - t2, 2))")


def import_seconds(env: dict, smoke: bool, log: Path) -> list[dict]:
    """A fresh interpreter's imports, twice (the first also reads the files from disk)."""
    last = "import peft" if smoke else "from vllm import LLM"
    runs = []
    for _ in range(2):
        t0 = time.time()
        out = subprocess.run([sys.executable, "-c", IMPORTS.format(last=last)], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=300)
        wall = time.time() - t0
        with open(log, "a") as f:
            f.write(f"== imports ==\n{out.stdout}{out.stderr[-2000:]}\n")
        parts = out.stdout.split() if out.returncode == 0 else []
        runs.append({"torch": float(parts[0]), "transformers": float(parts[1]), last.split()[-1]: float(parts[2]),
                     "interpreter_wall": round(wall, 2)} if len(parts) == 3 else {"exit": out.returncode})
    return runs


def part_startup(work, env, model, smoke, timeout, log) -> dict:
    from opsdkit.tiny import make_benchmark

    bench = work / "startup-bench.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in make_benchmark(2, seed=3)))
    t_end = time.time() + timeout
    imports = import_seconds(env, smoke, log)
    first = startup_once("first", model, bench, work, env, smoke, t_end - time.time(), log)
    second = startup_once("second", model, bench, work, env, smoke, t_end - time.time(), log)
    lines = [x for x in log.read_text(errors="replace").splitlines()
             if any(k in x for k in ("torch.compile", "Graph capturing", "init engine", "Model loading", "ready ",
                                     "Dynamo bytecode", "compiled graph", "Compil"))]
    return {"imports": imports, "first": first, "second": second, "goal_seconds": 30,
            "second_meets_goal": (second.get("process_start_to_first_sample_seconds") or 1e9) <= 30,
            "vllm_lines": [x.strip()[-240:] for x in lines][:40]}


def part_trainer(work, env, model, smoke, timeout, log) -> dict:
    out = work / "results" / "trainer_raw.json"
    cmd = [sys.executable, BENCH / "bench_trainer.py", "--out", out]
    cmd += ["--smoke", "--steps", "3", "--grad-accum", "2"] if smoke else ["--backend", "vllm", "--model-dir", model]
    r = run_logged(cmd, log, timeout, env)
    return {**r, **(json.loads(out.read_text()) if out.is_file() else {})}


def part_eval(work, env, model, smoke, timeout, log) -> dict:
    out = work / "results" / "eval_raw.json"
    cmd = [sys.executable, BENCH / "bench_eval.py", "--out", out, "--work-dir", work / "bench-eval"]
    cmd += ["--smoke"] if smoke else ["--backend", "vllm", "--model-dir", model]
    r = run_logged(cmd, log, timeout, env)
    return {**r, **(json.loads(out.read_text()) if out.is_file() else {})}


def part_chain(work, env, model, smoke, timeout, log) -> dict:
    out = work / "results" / "chain"
    cmd = [sys.executable, BENCH / "gpu_main_job.py", "--out-dir", out, "--work", work / "chain"]
    cmd += ["--smoke"] if smoke else ["--model-dir", model]
    r = run_logged(cmd, log, timeout, env)
    doc = json.loads((out / "main_job.json").read_text()) if (out / "main_job.json").is_file() else {}
    if (out / "main_job.log").is_file():
        with open(log, "a") as f:
            f.write((out / "main_job.log").read_text(errors="replace")[-LOG_TAIL:])
    return {**r, **doc}


RUNNERS = {"startup": part_startup, "trainer": part_trainer, "eval": part_eval, "chain": part_chain}


# --- the driver --------------------------------------------------------------------------------


def device_info() -> dict:
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return {"nvidia_smi": q.stdout.strip().splitlines()}
    except (OSError, subprocess.TimeoutExpired):
        return {"nvidia_smi": None}


def publish(work: Path, out_dir: Path, suite: dict) -> None:
    """Copy what exists so far to --out-dir (few files: the device tool brings back at most 8)."""
    results = work / "results"
    merged = dict(suite)
    merged["parts"] = {}
    for name in PARTS:
        f = results / f"{name}.json"
        if f.is_file():
            merged["parts"][name] = json.loads(f.read_text())
    (out_dir / "suite.json").write_text(json.dumps(merged, indent=1, default=str) + "\n")
    with open(out_dir / "parts.log", "w") as f:
        for name in PARTS:
            log = results / f"{name}.log"
            if log.is_file():
                f.write(f"===== {name} (last {LOG_TAIL} chars) =====\n{log.read_text(errors='replace')[-LOG_TAIL:]}\n")
    png = results / "chain" / "gpu_timeline.png"
    if png.is_file():
        shutil.copy(png, out_dir / "gpu_timeline.png")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    ap.add_argument("--budget-s", type=float, default=3600.0,
                    help="wall seconds for the whole command (a leased machine's limit; default 3600)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/opsd-bench"))
    ap.add_argument("--skip-done", action="store_true", help="skip parts with a result in WORK/results already")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny model, HF backend: checks the driver")
    args = ap.parse_args(argv)
    t_end = time.time() + args.budget_s
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        print(f"--parts: unknown {bad}; choose from {PARTS}", file=sys.stderr)
        return 2
    work = args.work
    (work / "results").mkdir(parents=True, exist_ok=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    env = part_env(work, args.smoke)
    suite = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "smoke": args.smoke, "parts_asked": parts,
             "vllm_cache_root": env["VLLM_CACHE_ROOT"], **({} if args.smoke else device_info()), "outcomes": {}}
    model = None
    for name in parts:
        result_file = work / "results" / f"{name}.json"
        if args.skip_done and result_file.is_file() and "error" not in json.loads(result_file.read_text()):
            suite["outcomes"][name] = "done before"
            continue
        left = t_end - time.time() - RESERVE_S
        if left < NEEDS_S[name] * (0.1 if args.smoke else 1.0):
            suite["outcomes"][name] = f"skipped: {left:.0f} s left, needs ~{NEEDS_S[name]} s"
            print(f"== {name}: skipped ({left:.0f} s left)", flush=True)
            continue
        log = work / "results" / f"{name}.log"
        log.write_text("")
        t0 = time.time()
        print(f"== {name}: starting ({left:.0f} s left)", flush=True)
        try:
            model = model or ensure_model(work, env, args.smoke, log)
            res = RUNNERS[name](work, env, model, args.smoke, min(MAX_S[name], t_end - time.time() - RESERVE_S), log)
        except Exception as exc:  # one part's failure must not lose the others
            res = {"error": f"{type(exc).__name__}: {exc}"}
        res["part_seconds"] = round(time.time() - t0, 1)
        result_file.write_text(json.dumps(res, indent=1, default=str) + "\n")
        suite["outcomes"][name] = "error" if "error" in res else f"exit {res.get('exit', 0)}"
        print(f"== {name}: {suite['outcomes'][name]} in {res['part_seconds']} s", flush=True)
        publish(work, args.out_dir, suite)
    suite["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    publish(work, args.out_dir, suite)
    print(json.dumps(suite["outcomes"], indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
