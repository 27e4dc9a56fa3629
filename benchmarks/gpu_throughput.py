"""GPU throughput of each layout: how many train -> eval chains a 6-hour session on 4 GPUs scores
when each chain gets 1, 2 or 4 GPUs. Measured on one GPU, in calls of a few minutes each.

On the GPU machine (vLLM installed; every command writes its JSON part to --out-dir and keeps a
copy under --work, so later commands find earlier parts; --work must survive between calls):

    python benchmarks/gpu_throughput.py train --layout 4x2-share --out-dir $OUT   # 3-5 min (the first engine start compiles)
    python benchmarks/gpu_throughput.py train --layout 1x4x8 --out-dir $OUT       # ~4 min
    python benchmarks/gpu_throughput.py eval-calibrate --out-dir $OUT             # 3-5 min
    python benchmarks/gpu_throughput.py eval-validate --out-dir $OUT              # ~4 min
    python benchmarks/gpu_throughput.py train --layout 2proc --out-dir $OUT       # ~4 min, optional
    python benchmarks/gpu_throughput.py train --layout 4x4-share --out-dir $OUT   # ~3 min, optional (else interpolated)

Each needs vLLM importable there (where it was installed beside the code, on PYTHONPATH).
Then anywhere (CPU), on the parts gathered in one folder:

    python benchmarks/gpu_throughput.py combine PARTS_DIR     # -> benchmarks/results/throughput_<gpu>.json

and on the CPU, every sub-command on the tiny model with HF generate, to check the script:

    python benchmarks/gpu_throughput.py smoke                  # ~2 min on 2 cores

What each part measures, and how the eval's GPU time at real lengths is obtained without running a
20-minute evaluation, is in docs/benchmarks.md ("Throughput of the layouts") and the module
docstrings of benchmarks/throughput/.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from throughput import combine as combine_mod  # noqa: E402
from throughput import eval_model  # noqa: E402
from throughput.train_run import LAYOUTS  # noqa: E402

SCRIPT = Path(__file__).resolve()
WORK = Path("/tmp/opsd-throughput")
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
CALL_LIMIT_S = 480  # a part stops its children after this long, so it is written inside a 10-minute call


def child_env(work: Path, smoke: bool) -> dict:
    env = dict(os.environ)
    env.update(NO_MULTICAST)
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("VLLM_CACHE_ROOT", str(work / "vllm-cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if smoke:
        env["OMP_NUM_THREADS"] = "1"
    return env


def cache_state(work: Path, stage: str) -> str:
    """cold: the first start of this stage's engine with this work dir (the vLLM compile cache has
    nothing for its configuration yet; a fresh machine has a fresh /tmp); warm: a later one."""
    marker = work / f".started-{stage}"
    state = "warm" if marker.exists() else "cold"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return state


def ensure_assets(work: Path, env: dict, smoke: bool) -> dict:
    """The random Qwen3-1.7B-shaped model (tiny tokenizer) and training rows, built once in a
    child process (the parent never touches CUDA, so it holds no GPU memory)."""
    key = work / ("assets-smoke.json" if smoke else "assets.json")
    if key.exists():
        doc = json.loads(key.read_text())
        if Path(doc["model_dir"]).exists() and Path(doc["data"]).exists():
            return doc
    cmd = [sys.executable, str(SCRIPT), "_assets", "--work", str(work)] + (["--smoke"] if smoke else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"building the model failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    key.write_text(json.dumps(doc))
    return doc


def save_part(doc: dict, name: str, work: Path, out_dir: Path | None) -> Path:
    for d in filter(None, (work / "parts", out_dir)):
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{name}.json").write_text(json.dumps(doc) + "\n")
    return (out_dir or work / "parts") / f"{name}.json"


def find_part(name: str, work: Path, out_dir: Path | None) -> dict | None:
    for d in filter(None, (out_dir, work / "parts")):
        if (d / f"{name}.json").exists():
            return json.loads((d / f"{name}.json").read_text())
    return None


# --- sub-commands ---------------------------------------------------------------------------------


def cmd_train(args) -> int:
    from throughput.train_run import run_layout

    env = child_env(args.work, args.smoke)
    assets = ensure_assets(args.work, env, args.smoke)
    state = cache_state(args.work, "train")
    part = run_layout(LAYOUTS[args.layout], SCRIPT, args.work, assets["model_dir"], assets["data"], env,
                      smoke=args.smoke, steps=args.steps, timeout_s=args.timeout_s)
    part["cache"] = state
    path = save_part(part, f"train_{args.layout}", args.work, args.out_dir)
    for i, r in enumerate(part["ranks"]):
        st, su = r.get("steady") or {}, r.get("startup") or {}
        print(f"{args.layout} rank {i}: {r['steps_done']} steps, steady step {st.get('step_s_median')} s (mean "
              f"{st.get('step_s_mean')}; rollout {st.get('rollout_s_mean')} + train {st.get('train_s_mean')}), "
              f"peak GPU {r.get('peak_memory_mib')}, start {su.get('process_to_ready_s')} s ({state}), host "
              f"{(r.get('host') or {}).get('stepping')}", flush=True)
    if part.get("concurrent"):
        print(f"together: {part['concurrent']}", flush=True)
    print(f"{'ok' if part['ok'] else 'FAILED: ' + str(part['failure'])}; wrote {path} ({part['wall_s']} s)")
    return 0 if part["ok"] else 1


def cmd_eval(args, phase: str) -> int:
    from throughput.eval_run import run_phase

    env = child_env(args.work, args.smoke)
    assets = ensure_assets(args.work, env, args.smoke)
    state = cache_state(args.work, "eval")
    kv_blocks, extra = None, []
    if phase == "validate":
        cal = find_part("eval_calibrate", args.work, args.out_dir)
        if not args.smoke:
            if not cal or not cal.get("engine", {}).get("kv_blocks"):
                print("eval-validate needs eval_calibrate's part (its engine's KV blocks): run eval-calibrate first "
                      f"with the same --work ({args.work})", file=sys.stderr)
                return 2
            kv_blocks = max(1, cal["engine"]["kv_blocks"] // args.scale)
        extra = ["--scale", str(args.scale), "--budget-s", str(args.budget_s)]
    else:
        extra = ["--real-seconds", str(args.real_seconds), "--sweep-seconds", str(args.sweep_seconds)]
    if args.native_memory:
        extra.append("--native-memory")
    part = run_phase(phase, SCRIPT, args.work, assets["model_dir"], env, smoke=args.smoke, kv_blocks=kv_blocks,
                     extra=extra, timeout_s=args.timeout_s)
    part["cache"] = state
    path = save_part(part, f"eval_{phase}", args.work, args.out_dir)
    for name, run in (part.get("runs") or {}).items():
        print(f"{phase} {name}: {run['samples_done']}/{run['samples']} samples in {run['wall_s']} s, "
              f"{run['trace']['tokens']} tokens, {run['trace']['steps']} steps, {run['trace']['preemptions']} "
              f"preemptions{'' if run['complete'] else ' (cut short)'}", flush=True)
    print(f"engine {part.get('engine')}; start {part.get('startup')} ({state}); host {part.get('host')}")
    print(f"{'ok' if part.get('ok') else 'FAILED'}; wrote {path} ({part['wall_s']} s)")
    if not part.get("ok"):
        print(part.get("log_tail", ""), file=sys.stderr)
    return 0 if part.get("ok") else 1


def load_parts(paths: list[Path]) -> dict[str, dict]:
    parts = {}
    for p in paths:
        for f in (sorted(p.glob("*.json")) if p.is_dir() else [p]):
            doc = json.loads(f.read_text())
            if isinstance(doc, dict) and doc.get("part") in ("train", "eval_calibrate", "eval_validate"):
                parts[f"train_{doc['layout']}" if doc["part"] == "train" else doc["part"]] = doc
    return parts


def cmd_combine(args) -> int:
    parts = load_parts(args.parts)
    if not parts:
        print(f"no parts found in {', '.join(map(str, args.parts))}", file=sys.stderr)
        return 2
    law = eval_model.LengthLaw(args.median, args.problem_sigma, args.sample_sigma, args.cap)
    doc = combine_mod.combine(parts, law, args.draws)
    out = args.out or ROOT / "benchmarks" / "results" / f"throughput_{doc['gpu']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(summary(doc))
    print(f"wrote {out}")
    return 0


def summary(doc: dict) -> str:
    lines = [f"{doc['gpu']} ({doc['gpu_name']}); layouts missing: {doc['layouts_missing'] or 'none'}"]
    for x in doc["layouts"]:
        lines.append(f"  {x['gpus_per_chain']} GPU(s)/chain x {x['concurrent_chains']}: train {x['train_wall_min']} min "
                     f"wall ({x['train_gpu_min']} GPU-min), eval {x['eval_wall_min']} min ({x['eval_gpu_min']} GPU-min), "
                     f"{x['chains_per_6h']} chains / 6 h [{x['train_source']}; eval {x['eval_source']}]")
    val = doc["eval"].get("validation", {})
    lines.append(f"  eval model validated: {val.get('validated')} (errors: " + ", ".join(
        f"{k} {v['error']:+.1%}" for k, v in val.items() if isinstance(v, dict) and "error" in v) + ")")
    pred = doc["eval"].get("predicted", {})
    if pred:
        lines.append(f"  predicted at real lengths: full eval on 1 GPU {pred['full_eval_one_gpu_minutes']} GPU-min; "
                     f"4-GPU eval {pred['four_gpu_eval_one_share_minutes']} min wall = "
                     f"{pred['four_gpu_eval_gpu_minutes']} GPU-min")
    return "\n".join(lines)


def cmd_smoke(args) -> int:
    """Every sub-command on the CPU (tiny model, HF generate), then combine."""
    out = args.out_dir or Path(tempfile.mkdtemp(prefix="throughput-smoke-"))
    work = args.work if args.work != WORK else out / "work"
    base = [sys.executable, str(SCRIPT)]
    common = ["--smoke", "--out-dir", str(out), "--work", str(work)]
    t0 = time.time()
    for cmd in (["train", "--layout", "4x2-share"], ["train", "--layout", "1x4x8"], ["train", "--layout", "2proc"],
                ["eval-calibrate"], ["eval-validate"]):
        t = time.time()
        proc = subprocess.run(base + cmd + common)
        print(f"[smoke] {' '.join(cmd)}: exit {proc.returncode} in {time.time() - t:.0f} s", flush=True)
        if proc.returncode != 0:
            return proc.returncode
    proc = subprocess.run(base + ["combine", str(out), "--out", str(out / "throughput_cpu-smoke.json")])
    print(f"[smoke] all in {time.time() - t0:.0f} s; results in {out}", flush=True)
    return proc.returncode


# --- the child processes ----------------------------------------------------------------------------


def cmd_assets(args) -> int:
    from bench_trainer import build_assets

    args.work.mkdir(parents=True, exist_ok=True)
    model, data = build_assets(args.work, args.smoke, None if args.smoke else args.work / "qwen3-1.7b-random")
    print(json.dumps({"model_dir": model, "data": data}))
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--out-dir", type=Path, help="where this call's JSON part goes (also kept under --work)")
        p.add_argument("--work", type=Path, default=WORK, help=f"model, compile cache, parts (default {WORK})")
        p.add_argument("--smoke", action="store_true", help="CPU, tiny model, HF generate")
        p.add_argument("--timeout-s", type=float, default=CALL_LIMIT_S)
        return p

    p = common(sub.add_parser("train", help="one training layout"))
    p.add_argument("--layout", choices=list(LAYOUTS), required=True)
    p.add_argument("--steps", type=int, help="optimizer steps per process (default: the layout's)")
    for phase in ("eval-calibrate", "eval-validate"):
        p = common(sub.add_parser(phase))
        p.add_argument("--native-memory", action="store_true",
                       help="give the engine 0.85 of this GPU (default: of an 80 GB H100, as the users' card)")
        if phase == "eval-calibrate":
            p.add_argument("--real-seconds", type=float, default=60.0, help="how long the real-length run goes")
            p.add_argument("--sweep-seconds", type=float, default=75.0, help="time for the long-prompt sweep")
        else:
            p.add_argument("--scale", type=int, default=8, help="lengths and KV cache divided by this")
            p.add_argument("--budget-s", type=float, default=360.0, help="both runs together stop after this long")
    p = sub.add_parser("combine", help="the parts -> benchmarks/results/throughput_<gpu>.json")
    p.add_argument("parts", type=Path, nargs="+", help="part files or folders holding them")
    p.add_argument("--out", type=Path)
    law = eval_model.REAL_LAW
    p.add_argument("--median", type=float, default=law.median, help="real eval lengths: median tokens")
    p.add_argument("--problem-sigma", type=float, default=law.problem_sigma)
    p.add_argument("--sample-sigma", type=float, default=law.sample_sigma)
    p.add_argument("--cap", type=int, default=law.cap)
    p.add_argument("--draws", type=int, default=combine_mod.DRAWS)
    p = sub.add_parser("smoke", help="every sub-command on the CPU, then combine")
    p.add_argument("--out-dir", type=Path)
    p.add_argument("--work", type=Path, default=WORK)
    p = sub.add_parser("_assets")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--smoke", action="store_true")
    p = sub.add_parser("_train-proc")
    for name in ("--layout", "--model-dir", "--data", "--events", "--out-dir", "--go"):
        p.add_argument(name)
    for name in ("--rank", "--steps", "--per-device", "--accum", "--completion"):
        p.add_argument(name, type=int)
    p.add_argument("--util-factor", type=float, default=1.0)
    p.add_argument("--smoke", action="store_true")
    p = sub.add_parser("_eval-engine")
    p.add_argument("--phase", choices=("calibrate", "validate"), required=True)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--kv-blocks", type=int)
    p.add_argument("--scale", type=int, default=8)
    p.add_argument("--budget-s", type=float, default=360.0)
    p.add_argument("--real-seconds", type=float, default=60.0)
    p.add_argument("--sweep-seconds", type=float, default=75.0)
    p.add_argument("--native-memory", action="store_true")
    p.add_argument("--smoke", action="store_true")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "train":
        return cmd_train(args)
    if args.cmd in ("eval-calibrate", "eval-validate"):
        return cmd_eval(args, args.cmd.removeprefix("eval-"))
    if args.cmd == "combine":
        return cmd_combine(args)
    if args.cmd == "smoke":
        return cmd_smoke(args)
    if args.cmd == "_assets":
        return cmd_assets(args)
    if args.cmd == "_train-proc":
        from throughput.train_run import child_main

        return child_main(args)
    from throughput.eval_run import child_main

    return child_main(args)


if __name__ == "__main__":
    sys.exit(main())
