"""`python -m eval`: parse, validate everything, then run (or resume) one evaluation.

Every mistake a user can make is found before anything is written and reported as one line
(what, where, why, how to fix) with exit code 2. Without --profile the benchmark's frozen
protocol applies (the qwen3-1.7b profile's evaluation settings) and --model/--benchmark are
required.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from opsdctl.errors import EXIT_USER_ERROR, UserError

FROZEN_PROFILE = "qwen3-1.7b"  # holds the benchmark's frozen protocol
DTYPES = ("float32", "bfloat16", "float16")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other user error
        raise UserError(f"python -m eval: {message}; see python -m eval --help")


def _bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("on", "true", "1", "yes"):
        return True
    if t in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not on/off")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m eval", description="avg@k evaluation: resumable, data-parallel, deterministic.",
                epilog="OPSD_EVAL_DRAW=N in the environment (N > 0; opsdctl sets it for a re-evaluation): "
                       "a fresh draw of samples, seeded from (seed, N); absent or 0 = the usual samples.")
    p.add_argument("--profile", help="tiny | qwen3-1.7b: model, benchmark and protocol (default: frozen protocol)")
    p.add_argument("--model", help="Hugging Face id or local dir (default: the profile's)")
    p.add_argument("--adapter", help="PEFT LoRA adapter dir to merge in; 'none' = base model")
    p.add_argument("--benchmark", help="dataset id (name[:split]) or local .json/.jsonl with problem/answer")
    p.add_argument("--k", type=int, help="samples per problem (smaller than the protocol's = partial; "
                                         "default: $VAL_N, else the protocol's)")
    p.add_argument("--num-problems", type=int, help="evaluate only the first N problems (partial; default: "
                                                    "$NUM_PROBLEMS, else all)")
    p.add_argument("--output-dir", required=True, help="results; re-running with the same dir resumes")
    p.add_argument("--gpus", help="comma list of CUDA device ids as CUDA_VISIBLE_DEVICES spells them, one worker "
                                  "per device; '' = CPU (default: CUDA_VISIBLE_DEVICES, else all GPUs, else CPU)")
    p.add_argument("--workers", type=int, default=1, help="worker processes per GPU, or on the CPU (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (default 1)")
    p.add_argument("--backend", choices=("auto", "hf", "vllm"), default="auto",
                   help="auto = vllm on GPUs when installed (hf for tiny://model), else hf")
    p.add_argument("--dtype", choices=("auto",) + DTYPES, default="auto",
                   help="auto = float32 on the CPU, bfloat16 on GPUs")
    p.add_argument("--batch-size", type=int, help="hf: rows per micro-batch (default: one round of one problem, k/3)")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int, help="0 = off")
    p.add_argument("--min-p", type=float)
    p.add_argument("--presence-penalty", type=float)
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--thinking", type=_bool, help="on | off (Qwen3 thinking mode)")
    p.add_argument("--seed", type=int)
    p.add_argument("--extract", choices=("released", "lenient"), default="released",
                   help="released (default) = the official script's last-\\boxed extraction and math-verify check; "
                        "lenient = ours: last well-formed \\boxed/\\fbox, numbers compared as numbers")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85,
                   help="vllm: the share of each GPU for its engines, split evenly among --workers (default 0.85)")
    p.add_argument("--max-num-seqs", type=int, default=64, help="vllm: sequences per engine (default 64)")
    p.add_argument("--merged-weights", choices=("push", "dir"), default="push",
                   help="vllm with --adapter: push = engines start from the base model while the adapter is merged, "
                        "then load the merge in place (compile cache hits, merge off the critical path); "
                        "dir = engines start from the merged model dir (default push)")
    bi = p.add_mutually_exclusive_group()
    bi.add_argument("--batch-invariant", dest="batch_invariant", action="store_true", default=False,
                    help="vllm: VLLM_BATCH_INVARIANT=1, so a sample does not depend on what it is batched with "
                         "(worker count, resume); ~40%% lower throughput on an H200 (docs/benchmarks.md)")
    bi.add_argument("--no-batch-invariant", dest="batch_invariant", action="store_false",
                    help="vllm: the default: full speed; samples depend on what is batched together")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    return p


def _devices(arg: str | None) -> list[str]:
    """CUDA_VISIBLE_DEVICES values, one per device; [] means CPU."""
    if arg is None:
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        if env is not None:
            return [d.strip() for d in env.split(",") if d.strip()]
        if not Path("/proc/driver/nvidia/gpus").is_dir():  # no NVIDIA driver: skip importing torch
            return []
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    out = [d.strip() for d in arg.split(",") if d.strip()]
    for d in out:
        if not (d.isdigit() or d.startswith(("GPU-", "MIG-"))):
            raise UserError(f"--gpus {arg}: {d!r} is not a CUDA device index or UUID; use e.g. --gpus 0,1 or --gpus ''")
    if len(set(out)) != len(out):
        raise UserError(f"--gpus {arg}: a device is listed twice; use --workers for several workers per GPU")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and out:
        allowed = [d.strip() for d in visible.split(",") if d.strip()]
        stray = [d for d in out if d not in allowed]
        if stray:  # ids are physical, as CUDA_VISIBLE_DEVICES spells them: never reach past what we were given
            raise UserError(f"--gpus {arg}: {','.join(stray)} not among CUDA_VISIBLE_DEVICES={visible}; "
                            f"pass the ids as CUDA_VISIBLE_DEVICES spells them, or leave --gpus out")
    return out


def _check_range(name: str, value, lo=None, hi=None, lo_open=False):
    if value is None:
        return
    if (lo is not None and (value <= lo if lo_open else value < lo)) or (hi is not None and value > hi):
        bounds = f"{'(' if lo_open else '['}{lo}, {hi}]"
        raise UserError(f"--{name.replace('_', '-')} {value}: out of range {bounds}; pick a value inside it")


def _partial_from_env(args) -> None:
    """The workspace convention for partial evals (VAL_N=4 NUM_PROBLEMS=15) when the flags are absent."""
    for attr, var in (("k", "VAL_N"), ("num_problems", "NUM_PROBLEMS")):
        text = os.environ.get(var, "").strip()
        if getattr(args, attr) is None and text:
            try:
                setattr(args, attr, int(text))
            except ValueError:
                raise UserError(f"{var}={text!r} in the environment: not a whole number; unset it or give "
                                f"--{attr.replace('_', '-')}") from None


def _draw_from_env() -> int:
    """Which fresh draw of samples (OPSD_EVAL_DRAW, set by opsdctl for a re-evaluation): absent = 0."""
    from opsdctl.contract.eval_request import ENV_DRAW

    text = os.environ.get(ENV_DRAW, "").strip()
    if not text:
        return 0
    if not re.fullmatch(r"[0-9]+", text):
        raise UserError(f"{ENV_DRAW}={text!r} in the environment: not a whole number 0 or more (which fresh draw "
                        f"of eval samples: 0 = the first, 1, 2, ... = re-evaluations); unset it or set 0, 1, 2, ...")
    return int(text)


def _backend(asked: str, model_arg: str, devices: list[str]) -> str:
    if asked != "auto":
        return asked
    import importlib.util

    # The tiny model starts in a second with HF; a vLLM engine would take a minute to boot.
    tiny = model_arg.startswith("tiny://")
    return "vllm" if devices and not tiny and importlib.util.find_spec("vllm") else "hf"


def _hold(args, fd: int) -> float:
    """Started ahead of its turn (eval.hold): start the worker pool's imports, then wait for the go.
    Only what needs neither the GPU nor the checkpoint happens before it; resolve() runs after."""
    from eval.hold import wait_for_go
    from eval.runner import prewarm
    from opsdctl.recipes.profiles import get_profile

    profile = get_profile(args.profile, "--profile") if args.profile else get_profile(FROZEN_PROFILE)
    backend = _backend(args.backend, args.model or profile.model, _devices(args.gpus))
    args.pool = prewarm(backend, {"batch_invariant": args.batch_invariant})
    print(f"eval: started ahead of the train stage's end; {backend} workers import now, then wait for the go",
          file=sys.stderr, flush=True)
    held = wait_for_go(fd)
    print(f"eval: go after {held:.1f} s", file=sys.stderr, flush=True)
    return held


def resolve(args) -> tuple:
    """(settings, problems, options) from parsed arguments; raises UserError."""
    from eval.benchmark import benchmark_hash, load_benchmark
    from eval.plan import draw_seed
    from eval.runner import RunOptions
    from eval.settings import EvalSettings, check_adapter, check_model, check_resume
    from opsdctl.recipes.profiles import get_profile

    profile = get_profile(args.profile, "--profile") if args.profile else get_profile(FROZEN_PROFILE)
    if not args.profile and not (args.model and args.benchmark):
        raise UserError("python -m eval: without --profile, give --model and --benchmark (or pass --profile tiny|qwen3-1.7b)")
    _partial_from_env(args)
    draw = _draw_from_env()
    for name, lo, hi, lo_open in (("k", 1, None, False), ("num_problems", 1, None, False),
                                  ("temperature", 0.0, None, False), ("top_p", 0.0, 1.0, True),
                                  ("top_k", 0, None, False), ("min_p", 0.0, 1.0, False),
                                  ("presence_penalty", -2.0, 2.0, False), ("max_new_tokens", 1, None, False),
                                  ("workers", 1, None, False), ("threads", 1, None, False),
                                  ("batch_size", 1, None, False), ("gpu_memory_utilization", 0.0, 1.0, True),
                                  ("max_num_seqs", 1, None, False)):
        _check_range(name, getattr(args, name), lo, hi, lo_open)

    devices = _devices(args.gpus)
    model_arg = args.model or profile.model
    backend = _backend(args.backend, model_arg, devices)
    if backend == "vllm" and not devices:
        raise UserError("--backend vllm: no GPU to run on (--gpus is empty); use --backend hf on the CPU")
    if backend == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise UserError("--backend vllm: vllm is not installed; pip install -e '.[gpu]' or use --backend hf")
    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if devices else "float32")

    model = check_model(model_arg)
    adapter, adapter_sha = check_adapter(args.adapter)
    bench_name = args.benchmark or profile.benchmark
    problems = load_benchmark(bench_name)
    n_wanted = args.num_problems or profile.eval_num_problems or len(problems)
    if n_wanted > len(problems):
        raise UserError(f"--num-problems {n_wanted}: the benchmark {bench_name} has only {len(problems)} problems")
    pick = lambda arg, default: default if arg is None else arg  # noqa: E731
    settings = EvalSettings(
        model=model, adapter=adapter, adapter_sha256=adapter_sha, benchmark=bench_name,
        benchmark_hash=benchmark_hash(problems), n_benchmark=len(problems), num_problems=n_wanted,
        k=pick(args.k, profile.eval_k), reference_k=profile.eval_k,
        temperature=float(pick(args.temperature, profile.eval_temperature)),
        top_p=float(pick(args.top_p, profile.eval_top_p)), top_k=int(pick(args.top_k, profile.eval_top_k)),
        min_p=float(pick(args.min_p, profile.eval_min_p)),
        presence_penalty=float(pick(args.presence_penalty, profile.eval_presence_penalty)),
        max_new_tokens=int(pick(args.max_new_tokens, profile.eval_max_new_tokens)),
        thinking=bool(pick(args.thinking, profile.eval_thinking)),
        seed=draw_seed(int(pick(args.seed, profile.eval_seed)), draw), draw=draw,
        backend=backend, dtype=dtype, batch_size=args.batch_size if backend == "hf" else None,
        profile=args.profile, extract=args.extract,
        backend_options={"batch_invariant": args.batch_invariant} if backend == "vllm" else {},
    )
    if backend == "vllm":
        settings.backend_options.update(gpu_memory_utilization=args.gpu_memory_utilization,
                                        max_num_seqs=args.max_num_seqs)

    out = Path(args.output_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"--output-dir {out}: exists and is not a directory; choose another path")
    settings_file = out / "settings.json"
    if settings_file.exists():
        try:
            recorded = json.loads(settings_file.read_text())
        except (json.JSONDecodeError, OSError):
            raise UserError(f"{settings_file}: unreadable; remove the output dir or choose a new --output-dir") from None
        check_resume(recorded, settings, str(settings_file))
    elif (out / "samples.jsonl").exists():
        raise UserError(f"--output-dir {out}: holds samples.jsonl but no settings.json, so its samples cannot "
                        f"be trusted; choose a new --output-dir")
    opts = RunOptions(output_dir=out, devices=devices, workers_per_device=args.workers, threads=args.threads,
                      quiet=args.quiet, merged_weights=args.merged_weights, pool=getattr(args, "pool", "spawn"),
                      held_seconds=getattr(args, "held_seconds", None))
    return settings, problems, opts


def main(argv: list[str] | None = None) -> int:
    from eval.hold import NoGo, go_fd
    from eval.records import final_line
    from eval.runner import EvalFailed, run

    try:
        args = build_parser().parse_args(argv)
        fd = go_fd()
        if fd is not None:
            args.held_seconds = _hold(args, fd)
        settings, problems, opts = resolve(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except NoGo as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return 1
    try:
        doc = run(settings, problems, opts)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except EvalFailed as exc:
        print(f"eval failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("eval interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    print(final_line(doc["k"], doc["problems"]), flush=True)
    return 0
