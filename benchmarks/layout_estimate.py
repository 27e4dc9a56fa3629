"""Chains per 6-hour session for each GPU layout, ESTIMATED from figures measured on one H200.
Pure python on a CPU, a few seconds; no GPU was available to run benchmarks/gpu_throughput.py, which
measures these figures instead of estimating them.

    python benchmarks/layout_estimate.py     # -> benchmarks/results/layout_estimate.{json,md}

A chain is 100 optimizer steps of global batch 32, then 30 problems x 12 samples. With
`gpus_per_chain` = g on 4 GPUs, 4 / g chains run at once; each of a chain's g training processes
does 32 / g rows a step (the trainer samples a step's rows in one rollout call), and its evaluation
runs one engine per GPU from one shared queue. The inputs, every one a committed results file
except the decode-versus-batch points (DECODE_POINTS):

- training share of one GPU at 8 rows (the 4-GPU layout's), steady step = rollout + training, and
  the first step's extra: trainer_h200_vllm.json;
- rollout of 32 / g rows: the measured 8-row rollout x decode(32 / g) / decode(8), decode(b) the
  seconds vLLM takes for 1,024 tokens at batch b, interpolated on log(b) between DECODE_POINTS;
- training compute in proportion to the rows (micro-batches of 4 rows, accumulation 8 / g);
- evaluation: benchmarks/throughput/eval_model.simulate at real lengths (REAL_LAW: median 12k
  tokens, cap 38,912), with a step cost whose per-step base and per-token KV read are fitted on
  DECODE_POINTS and whose KV read is then calibrated on eval_h200_vllm.json's one-engine run (the
  decode-only fit predicts that run within a few percent: reported as its check);
- KV cache of an eval engine: the 1,072,768 tokens vLLM reported on the H200 at 0.85 of its memory
  (vllm_suite_h200.log); the H100's from the same non-KV memory;
- start-ups: train warm (stage seconds - steps - exit) from main_job_h200_vllm{,_prestart,_no_prestart}.json,
  cold from main_job_h200_vllm_teardown.json (an empty compile cache); eval warm after the go (the
  evaluator is pre-started) from main_job_h200_vllm_prestart.json; eval cold minus warm engine start
  from startup_h200_vllm.json. The cold extra is paid once a session, by every slot at once.
- H100: decode (rollouts, eval steps) scaled by the HBM bandwidth ratio 4.8 / 3.35 TB/s; training
  compute and prefill by the dense bf16 FLOP ratio, 1.0 (the H100 SXM and the H200 are the same
  GH100 compute at 989 TFLOP/s); start-ups unchanged.
Not modelled: the gradient all-reduce between ranks (a few ms a step over NVLink; it favours the
multi-GPU layouts slightly), host contention between concurrent chains, real completions stopping
before 1,024 tokens in training.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from throughput import eval_model as em  # noqa: E402
from throughput.layouts import (HOST_GPUS, SESSION_MINUTES, STEPS, LayoutDurations, Startups,  # noqa: E402
                                TrainShare, chains_in_session, layout_durations, rows_per_gpu)

RESULTS = ROOT / "benchmarks" / "results"
# vLLM generating 1,024 tokens for b prompts on one H200 (rollout engine, random-init Qwen3-1.7B
# shapes), as reported with the first single-GPU runs; not in a committed results file.
DECODE_POINTS = ((4, 3.0), (16, 3.5), (64, 4.9))
DECODE_TOKENS = 1024
TRAIN_PROMPT_TOKENS = 200  # a training prompt through the chat template (assumed; small beside 1,024)
EVAL_PROMPT_TOKENS = 200  # an AIME prompt through the chat template (assumed; small beside 12k)
HBM_TBPS = {"h200": 4.8, "h100": 3.35}
BF16_TFLOPS = {"h200": 989.0, "h100": 989.0}  # dense; the same GH100 compute
GPU_MIB = {"h200": 143771, "h100": 81559}
EVAL_MEMORY_SHARE = 0.85  # the evaluator's gpu_memory_utilization
H200_EVAL_KV_TOKENS = 1_072_768  # vLLM's "GPU KV cache size" at 0.85 on the H200 (vllm_suite_h200.log)
PREFILL_S_PER_TOKEN = 2 * 1.7e9 / 400e12  # 2 FLOPs a parameter a token at ~40% of 989 TFLOP/s (assumed)
PAIR_S = 4 * 2048 * 28 / 400e12  # attention FLOPs of one (query, key) pair, 28 layers of 2,048 (assumed)
EVAL_SEEDS = tuple(range(1000, 1008))  # length draws the real-length evaluation averages over
LAYOUTS = (1, 2, 4)  # gpus_per_chain on the 4-GPU host
FACTOR_GPUS = (1, 2, 4, 8)  # layout factors for opsdctl/plan/layout_costs.py (8: an 8-GPU host)
FACTOR_GPU = "h100"  # the users' GPU: the profile's 19 / 27 minutes are 4 x H100 figures


# --- pure pieces ---------------------------------------------------------------------------------


def log_batch_interp(points, b: float) -> float:
    """Seconds at batch b, piecewise linear in log(b) through `points` ((batch, seconds), batches
    increasing); beyond the ends, the end segment's line."""
    pts = sorted(points)
    if len(pts) < 2:
        raise ValueError("need two points or more to interpolate")
    if b <= 0:
        raise ValueError(f"batch {b}: must be positive")
    i = 1
    while i < len(pts) - 1 and b > pts[i][0]:
        i += 1
    (b0, t0), (b1, t1) = pts[i - 1], pts[i]
    w = (math.log(b) - math.log(b0)) / (math.log(b1) - math.log(b0))
    return t0 + w * (t1 - t0)


@dataclass(frozen=True)
class MeasuredShare:
    """One GPU's measured part of a step: `rows` rows, steady rollout and training seconds, and the
    first step's extra seconds over the steady step."""

    rows: int
    rollout_s: float
    train_s: float
    first_extra_s: float


def share_for(rows: int, m: MeasuredShare, points=DECODE_POINTS, decode_ratio: float = 1.0,
              flop_ratio: float = 1.0) -> TrainShare:
    """One GPU's part of a step at `rows` rows, from the measured share: the rollout by the decode
    curve's ratio (and the GPU's decode speed ratio), the training compute in proportion to rows."""
    rollout = m.rollout_s * log_batch_interp(points, rows) / log_batch_interp(points, m.rows) / decode_ratio
    train = m.train_s * rows / m.rows / flop_ratio
    step = rollout + train
    source = "measured" if rows == m.rows and decode_ratio == flop_ratio == 1.0 else \
        f"estimated from the measured {m.rows}-row share"
    return TrainShare(rows, step, step + m.first_extra_s, rollout, train, source)


def decode_totals(b: int, tokens: int = DECODE_TOKENS, prompt: int = TRAIN_PROMPT_TOKENS) -> tuple[int, int, int]:
    """Steps, sequence-tokens and context tokens read of decoding `tokens` tokens for b prompts."""
    ctx = b * (tokens * prompt + tokens * (tokens + 1) // 2)
    return tokens, b * tokens, ctx


def decode_seconds(base: float, per_ctx: float, b: int) -> float:
    steps, _, ctx = decode_totals(b)
    return steps * base + ctx * per_ctx


def fit_decode_cost(points=DECODE_POINTS, tokens: int = DECODE_TOKENS, prompt: int = TRAIN_PROMPT_TOKENS):
    """(base, per_ctx): seconds a step and a context token read, least squares over the points
    (seconds = steps x base + context tokens x per_ctx)."""
    import numpy as np

    rows = [decode_totals(b, tokens, prompt) for b, _ in points]
    x = np.array([[steps, ctx] for steps, _, ctx in rows], dtype=float)
    y = np.array([t for _, t in points], dtype=float)
    scale = x.max(axis=0)
    coef, *_ = np.linalg.lstsq(x / scale, y, rcond=None)
    base, per_ctx = coef / scale
    if base < 0 or per_ctx < 0:
        raise ValueError(f"decode points {points} give a negative cost (base {base}, per_ctx {per_ctx})")
    return float(base), float(per_ctx)


def feature_totals(work: em.Workload, spec: em.EngineSpec) -> dict[str, float]:
    """What one engine's run sums of each step-cost feature. With one engine the schedule does not
    depend on the costs, so its wall time is linear in them: sum(totals[f] x cost.f)."""
    out = {}
    for name in em.FEATURES:
        unit = em.StepCost(**{f: (1.0 if f == name else 0.0) for f in em.FEATURES})
        out[name] = em.simulate(work, spec, unit).wall_s
    return out


def predicted_seconds(cost: em.StepCost, totals: dict[str, float]) -> float:
    return sum(getattr(cost, f) * totals[f] for f in em.FEATURES)


def calibrate_per_ctx(cost: em.StepCost, totals: dict[str, float], measured_s: float) -> em.StepCost:
    """The same cost with its per-token KV read set so the run takes `measured_s`."""
    rest = predicted_seconds(cost, totals) - cost.per_ctx * totals["per_ctx"]
    per_ctx = (measured_s - rest) / totals["per_ctx"]
    if per_ctx <= 0:
        raise ValueError(f"{measured_s} s cannot be matched: the other terms already take {rest:.1f} s")
    return em.StepCost(cost.base, cost.per_seq, per_ctx, cost.per_gen, cost.per_prefill, cost.per_pair)


def on_gpu(cost: em.StepCost, decode_ratio: float, flop_ratio: float) -> em.StepCost:
    """The step cost on another GPU: decode terms (memory-bound) / decode_ratio, prefill terms
    (compute-bound) / flop_ratio; a ratio is the other GPU's speed over the measured one's."""
    return em.StepCost(cost.base / decode_ratio, cost.per_seq / decode_ratio, cost.per_ctx / decode_ratio,
                       cost.per_gen / decode_ratio, cost.per_prefill / flop_ratio, cost.per_pair / flop_ratio)


def kv_tokens_on(gpu_mib: float, share: float, non_kv_mib: float) -> int:
    """KV tokens an engine holds with `share` of a GPU of `gpu_mib`, less its weights and buffers."""
    return max(0, int((gpu_mib * share - non_kv_mib) * 1024 * 1024 // em.KV_BYTES_PER_TOKEN))


def eval_generation_s(cost: em.StepCost, spec: em.EngineSpec, engines: int, seeds=EVAL_SEEDS,
                      law: em.LengthLaw = em.REAL_LAW, problems: int = 30, k: int = 12) -> list[float]:
    """Generation seconds of the whole evaluation on `engines` engines, one per length draw."""
    ids = [f"P{i:02d}" for i in range(problems)]
    out = []
    for seed in seeds:
        lengths = em.draw_lengths(law, ids, k, seed)
        work = em.plan_workload(ids, k, 0, [EVAL_PROMPT_TOKENS] * problems, lengths)
        out.append(em.simulate(work, spec, cost, engines=engines).wall_s)
    return out


def factors_from(walls: dict[int, tuple[float, float]], reference: int = 4) -> dict[str, dict[int, float]]:
    """Layout factors: a stage's wall on g GPUs over its wall on `reference` GPUs; walls[g] = (train, eval)."""
    t4, e4 = walls[reference]
    return {"train": {g: round(t / t4, 2) for g, (t, _) in sorted(walls.items())},
            "eval": {g: round(e / e4, 2) for g, (_, e) in sorted(walls.items())}}


def planner_chains(factors: dict, train_min: float, eval_min: float, gpus: tuple = LAYOUTS,
                   host_gpus: int = HOST_GPUS, session_min: float = SESSION_MINUTES) -> dict[int, dict]:
    """Chains per session as the planner and simulator see a layout: the profile's 4-GPU minutes x
    the layout factors (no start-up beyond what those minutes hold)."""
    out = {}
    for g in gpus:
        chain = train_min * factors["train"][g] + eval_min * factors["eval"][g]
        whole, fluid = chains_in_session(host_gpus // g, chain, session_min)
        out[g] = {"chain_wall_min": round(chain, 2), "chain_gpu_min": round(g * chain, 2), "chains_per_6h": whole,
                  "chains_per_6h_fluid": round(fluid, 2)}
    return out


# --- reading the committed figures -------------------------------------------------------------


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def measured_share() -> MeasuredShare:
    d = _load("trainer_h200_vllm.json")
    st, cfg = d["steady_state"], d["config"]
    first = d["steps"][0]["step_seconds"]
    return MeasuredShare(cfg["per_device_batch"] * cfg["grad_accum"], st["rollout_seconds"], st["train_seconds"],
                         first - st["step_seconds"])


def _train_startup(doc: dict) -> float:
    """A chain's train stage less its steps and its exit: process start to the first step."""
    steps = sum(s["step_seconds"] for s in doc["train"]["steps"])
    return doc["chain"]["train"]["seconds"] - steps - doc["gaps"]["train_exit_seconds"]


def measured_startups() -> tuple[Startups, dict]:
    warm_files = ("main_job_h200_vllm.json", "main_job_h200_vllm_prestart.json", "main_job_h200_vllm_no_prestart.json")
    warm = [_train_startup(_load(f)) for f in warm_files]
    cold_doc = _load("main_job_h200_vllm_teardown.json")
    cold = _train_startup(cold_doc)
    exits = [_load(f)["gaps"]["train_exit_seconds"] for f in warm_files]
    eval_ready = _load("main_job_h200_vllm_prestart.json")["gaps"]["eval_start_to_first_sample_seconds"]
    su = _load("startup_h200_vllm.json")["parts"]["startup"]
    eval_cold, eval_warm = su["first"]["engine_load_seconds"][0], su["second"]["engine_load_seconds"][0]
    train_warm = statistics.median(warm)
    starts = Startups(train_ready_s=train_warm, train_exit_s=statistics.median(exits), eval_ready_s=eval_ready,
                      cold_extra_s=max(0.0, cold - train_warm) + max(0.0, eval_cold - eval_warm))
    doc = {"train_ready_warm_s": [round(x, 1) for x in warm], "train_ready_cold_s": round(cold, 1),
           "train_exit_s": exits, "eval_ready_after_go_warm_s": eval_ready,
           "eval_engine_cold_s": eval_cold, "eval_engine_warm_s": eval_warm,
           "used": {k: round(v, 1) for k, v in starts.__dict__.items()}}
    return starts, doc


def eval_calibration() -> tuple[em.StepCost, em.StepCost, dict]:
    """The H200 eval step cost: base and KV read fitted on DECODE_POINTS, the KV read calibrated on
    eval_h200_vllm.json's one-engine run (bi-off-1w: the evaluator's default, no batch invariance)."""
    from bench_eval import JITTER, item_lengths

    d = _load("eval_h200_vllm.json")
    wl, run = d["workload"], d["runs"]["bi-off-1w"]
    ids = [f"tiny-{i:03d}" for i in range(1, wl["problems"] + 1)]  # opsdkit.tiny.make_benchmark's ids
    lengths = item_lengths(ids, wl["k"], median=wl["median_tokens"], sigma=wl["sigma"], jitter=JITTER,
                           cap=wl["max_tokens"], seed=wl["seed"])
    if sum(lengths.values()) != wl["total_tokens"]:
        raise SystemExit(f"eval_h200_vllm.json: the workload's lengths sum to {sum(lengths.values())}, "
                         f"not its {wl['total_tokens']} tokens: bench_eval.item_lengths changed")
    work = em.plan_workload(ids, wl["k"], wl["seed"], [EVAL_PROMPT_TOKENS] * len(ids), lengths)
    spec = em.EngineSpec(64, H200_EVAL_KV_TOKENS // 16)
    totals = feature_totals(work, spec)
    base, per_ctx = fit_decode_cost()
    decode_only = em.StepCost(base, 0.0, per_ctx, 0.0, PREFILL_S_PER_TOKEN, PAIR_S)
    cost = calibrate_per_ctx(decode_only, totals, run["generation_seconds"])
    predicted = predicted_seconds(decode_only, totals)
    doc = {"decode_points": [list(p) for p in DECODE_POINTS],
           "decode_fit": {"base_ms": round(1e3 * base, 4), "per_ctx_ns": round(1e9 * per_ctx, 3),
                          "fit_s": [round(decode_seconds(base, per_ctx, b), 3) for b, _ in DECODE_POINTS]},
           "check_on_eval_h200_vllm": {"measured_generation_s": run["generation_seconds"],
                                       "decode_fit_predicts_s": round(predicted, 2),
                                       "error": round(predicted / run["generation_seconds"] - 1, 4)},
           "calibrated": {"per_ctx_ns": round(1e9 * cost.per_ctx, 3),
                          "kv_read_tb_per_s": round(em.KV_BYTES_PER_TOKEN / cost.per_ctx / 1e12, 2)},
           "step_cost_h200": cost.to_json()}
    return cost, decode_only, doc


# --- the estimate ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """What a layout's chain is built from (the H200's figures; other GPUs by their ratios)."""

    share: MeasuredShare
    starts: Startups
    eval_cost: em.StepCost  # H200
    non_kv_mib: float  # an eval engine's memory that is not KV cache
    points: tuple = DECODE_POINTS
    law: em.LengthLaw = em.REAL_LAW


def layouts_on(gpu: str, inp: Inputs, gpus=FACTOR_GPUS) -> tuple[dict[int, LayoutDurations], dict[int, list[float]], int]:
    """Each layout's chain on 4 (or g) GPUs of kind `gpu`, the eval generation seconds per length
    draw, and the eval engine's KV tokens."""
    decode = HBM_TBPS[gpu] / HBM_TBPS["h200"]
    flops = BF16_TFLOPS[gpu] / BF16_TFLOPS["h200"]
    cost = on_gpu(inp.eval_cost, decode, flops)
    kv = H200_EVAL_KV_TOKENS if gpu == "h200" else kv_tokens_on(GPU_MIB[gpu], EVAL_MEMORY_SHARE, inp.non_kv_mib)
    spec = em.EngineSpec(64, kv // 16)
    layouts: dict[int, LayoutDurations] = {}
    gen: dict[int, list[float]] = {}
    for g in gpus:
        share = share_for(rows_per_gpu(g), inp.share, inp.points, decode_ratio=decode, flop_ratio=flops)
        gen[g] = eval_generation_s(cost, spec, g, law=inp.law)
        layouts[g] = layout_durations(g, share, statistics.fmean(gen[g]), inp.starts,
                                      "eval_model.simulate (estimate)", host_gpus=max(HOST_GPUS, g))
    return layouts, gen, kv


def ratios(layouts: dict[int, LayoutDurations]) -> tuple[dict, dict]:
    """Chains per 6 h of each layout over one chain at a time (4 GPUs per chain): whole, fluid."""
    four = layouts[4]
    return ({str(g): round(layouts[g].chains_per_6h / four.chains_per_6h, 2) for g in LAYOUTS},
            {str(g): round(layouts[g].chains_per_6h_fluid / four.chains_per_6h_fluid, 2) for g in LAYOUTS})


def sensitivity(inp: Inputs, decode_only: em.StepCost, gpu: str = FACTOR_GPU) -> list[dict]:
    """The H100 estimate with one input changed at a time: how far the answer moves."""
    flat = ((4, 3.0), (64, 3.0))
    proportional = tuple((b, float(b)) for b in (4, 8, 16, 32, 64))
    variants = [
        ("as estimated", inp),
        ("eval cost: the decode-point fit alone (not calibrated on eval_h200_vllm)", replace(inp, eval_cost=decode_only)),
        ("eval lengths: median 9k tokens", replace(inp, law=replace(inp.law, median=9_000))),
        ("eval lengths: median 15k tokens", replace(inp, law=replace(inp.law, median=15_000))),
        ("rollout time flat in the batch (32 rows as fast as 8)", replace(inp, points=flat)),
        ("rollout time in proportion to the rows (no batching gain)", replace(inp, points=proportional)),
        ("no cold compiles (a warm cache on the host)", replace(inp, starts=replace(inp.starts, cold_extra_s=0.0))),
    ]
    out = []
    for name, v in variants:
        layouts, _, _ = layouts_on(gpu, v, LAYOUTS)
        whole, fluid = ratios(layouts)
        walls = {g: (x.train_wall_min, x.eval_wall_min) for g, x in layouts.items()}
        out.append({"variant": name, "chains_per_6h": {str(g): layouts[g].chains_per_6h for g in LAYOUTS},
                    "vs_one_chain_at_a_time": whole, "vs_one_chain_at_a_time_fluid": fluid,
                    "factors": {k: {str(g): x for g, x in f.items()} for k, f in factors_from(walls).items()}})
    return out


def estimate() -> dict:
    m = measured_share()
    starts, start_doc = measured_startups()
    cost200, decode_only, cal_doc = eval_calibration()
    non_kv = GPU_MIB["h200"] * EVAL_MEMORY_SHARE - H200_EVAL_KV_TOKENS * em.KV_BYTES_PER_TOKEN / 2**20
    inp = Inputs(m, starts, cost200, non_kv)
    gpus_doc = {}
    for gpu in ("h200", "h100"):
        layouts, gen, kv = layouts_on(gpu, inp)
        walls = {g: (x.train_wall_min, x.eval_wall_min) for g, x in layouts.items()}
        whole, fluid = ratios(layouts)
        decode, flops = HBM_TBPS[gpu] / HBM_TBPS["h200"], BF16_TFLOPS[gpu] / BF16_TFLOPS["h200"]
        gpus_doc[gpu] = {
            "decode_speed_vs_h200": round(decode, 4), "train_flops_vs_h200": round(flops, 4), "eval_kv_tokens": kv,
            "train_shares": {str(g): {k: (round(v, 3) if isinstance(v, float) else v)
                                      for k, v in share_for(rows_per_gpu(g), m, decode_ratio=decode,
                                                            flop_ratio=flops).__dict__.items()} for g in FACTOR_GPUS},
            "eval_generation_min": {str(g): {"mean": round(statistics.fmean(v) / 60, 2),
                                             "sd": round(statistics.stdev(v) / 60, 2)} for g, v in gen.items()},
            "layouts": [layouts[g].to_json() for g in LAYOUTS],
            "chains_per_6h": {str(g): layouts[g].chains_per_6h for g in LAYOUTS},
            "chains_per_6h_fluid": {str(g): round(layouts[g].chains_per_6h_fluid, 2) for g in LAYOUTS},
            "vs_one_chain_at_a_time": whole, "vs_one_chain_at_a_time_fluid": fluid,
            "eight_gpu_chain_on_8_gpus": layouts[8].to_json(),
            "factors": {k: {str(g): v for g, v in f.items()} for k, f in factors_from(walls).items()},
        }
    from opsdctl.recipes.profiles import PROFILES

    prof = PROFILES["qwen3-1.7b"]
    factors = {k: {int(g): v for g, v in f.items()} for k, f in gpus_doc[FACTOR_GPU]["factors"].items()}
    planner = planner_chains(factors, prof.train_minutes, prof.eval_minutes)
    return {
        "benchmark": "layout_estimate", "kind": "estimate", "measured_on": "one NVIDIA H200",
        "steps": STEPS, "global_batch": 32, "session_minutes": SESSION_MINUTES, "host_gpus": HOST_GPUS,
        "inputs": {"files": ["benchmarks/results/trainer_h200_vllm.json", "benchmarks/results/eval_h200_vllm.json",
                             "benchmarks/results/vllm_suite_h200.log (KV cache size)",
                             "benchmarks/results/startup_h200_vllm.json",
                             "benchmarks/results/main_job_h200_vllm.json",
                             "benchmarks/results/main_job_h200_vllm_prestart.json",
                             "benchmarks/results/main_job_h200_vllm_no_prestart.json",
                             "benchmarks/results/main_job_h200_vllm_teardown.json"],
                   "measured_share_8_rows": m.__dict__, "startups": start_doc, "eval_calibration": cal_doc,
                   "eval_law": em.REAL_LAW.__dict__, "eval_length_seeds": list(EVAL_SEEDS)},
        "assumptions": ASSUMPTIONS,
        "gpus": gpus_doc,
        "factors": {k: {str(g): v for g, v in f.items()} for k, f in factors.items()},
        "factors_gpu": FACTOR_GPU,
        "planner_view": {"train_min_4gpu": prof.train_minutes, "eval_min_4gpu": prof.eval_minutes,
                         "by_gpus_per_chain": {str(g): v for g, v in planner.items()},
                         "vs_one_chain_at_a_time": {str(g): round(v["chains_per_6h"] / planner[4]["chains_per_6h"], 2)
                                                    for g, v in planner.items()}},
        "sensitivity_h100": sensitivity(inp, decode_only),
        "goal_vs_one_chain_at_a_time": 2.0,
    }


ASSUMPTIONS = [
    "an estimate, not a measurement: benchmarks/gpu_throughput.py measures these figures on a GPU machine",
    "decode(b) for 1,024 tokens on one H200 at b = 4, 16, 64: 3.0, 3.5, 4.9 s (reported with the first single-GPU "
    "runs, not in a committed results file), interpolated on log(b); only its ratios are used, anchored on the "
    "measured 8-row rollout",
    "training compute in proportion to the rows a GPU does (micro-batches of 4 rows)",
    "completions forced to 1,024 tokens in training (real ones stop earlier: the slow end)",
    "eval lengths: a per-problem log-normal around a 12k-token median, per-sample spread, cap 38,912 "
    "(eval_model.REAL_LAW), averaged over 8 draws",
    "prompts of 200 tokens; prefill at ~40% of 989 TFLOP/s",
    "H100 = H200 x 3.35 / 4.8 for decode (memory-bound), x 1.0 for training compute and prefill (same dense bf16 "
    "FLOPs); its eval KV cache from the H200's non-KV memory at 0.85 of 80 GB",
    "start-ups as measured on the H200 for every layout and GPU; a multi-process trainer starts as fast as one",
    "no gradient all-reduce between ranks and no host contention between concurrent chains",
    "the planner view: the profile's 4 x H100 minutes (19 train, 27 eval) x the H100 layout factors",
]


def markdown(doc: dict) -> str:
    lines = [f"# Chains per 6 hours per GPU layout: an ESTIMATE (from figures measured on {doc['measured_on']})", "",
             "`python benchmarks/layout_estimate.py`; the inputs and every assumption are listed below and in "
             "layout_estimate.json. The goal was >= 2x the chains of one chain at a time.", ""]
    for gpu in ("h100", "h200"):
        g = doc["gpus"][gpu]
        lines += [f"## {gpu.upper()} x 4 ({'scaled from the H200' if gpu != 'h200' else 'the measured GPU'})", "",
                  "| GPUs per chain | chains at once | train min | eval min | chain min | GPU-min per chain "
                  "| chains per 6 h | vs one at a time | fluid rate (vs) |", "|---|---|---|---|---|---|---|---|---|"]
        for x in g["layouts"]:
            k = str(x["gpus_per_chain"])
            lines.append(f"| {k} | {x['concurrent_chains']} | {x['train_wall_min']:.1f} | {x['eval_wall_min']:.1f} "
                         f"| {x['chain_wall_min']:.1f} | {x['chain_gpu_min']:.1f} | {x['chains_per_6h']} "
                         f"| {g['vs_one_chain_at_a_time'][k]:.2f}x | {x['chains_per_6h_fluid']:.1f} "
                         f"({g['vs_one_chain_at_a_time_fluid'][k]:.2f}x) |")
        lines += ["", f"Layout factors (stage wall on g GPUs / on 4): train {g['factors']['train']}, "
                      f"eval {g['factors']['eval']}.", ""]
    pv = doc["planner_view"]
    lines += ["## What the planner and the simulator use", "",
              f"opsdctl/plan/layout_costs.py FACTORS = the {doc['factors_gpu'].upper()} factors: train "
              f"{doc['factors']['train']}, eval {doc['factors']['eval']}. With the profile's 4-GPU minutes "
              f"({pv['train_min_4gpu']:g} train, {pv['eval_min_4gpu']:g} eval):", "",
              "| GPUs per chain | chain min | GPU-min per chain | chains per 6 h | vs one at a time | fluid rate |",
              "|---|---|---|---|---|---|"]
    for k, v in pv["by_gpus_per_chain"].items():
        lines.append(f"| {k} | {v['chain_wall_min']:.1f} | {v['chain_gpu_min']:.1f} | {v['chains_per_6h']} "
                     f"| {pv['vs_one_chain_at_a_time'][k]:.2f}x | {v['chains_per_6h_fluid']:.1f} |")
    lines += ["", "## How far the answer moves (H100, one input changed at a time)", "",
              "| variant | chains per 6 h (1 / 2 / 4 GPUs per chain) | 1 GPU vs one at a time (fluid) "
              "| 2 GPUs vs one at a time (fluid) | factors train 1 / 2, eval 1 / 2 |", "|---|---|---|---|---|"]
    for v in doc["sensitivity_h100"]:
        c, w, f, fa = v["chains_per_6h"], v["vs_one_chain_at_a_time"], v["vs_one_chain_at_a_time_fluid"], v["factors"]
        lines.append(f"| {v['variant']} | {c['1']} / {c['2']} / {c['4']} | {w['1']:.2f}x ({f['1']:.2f}x) "
                     f"| {w['2']:.2f}x ({f['2']:.2f}x) | {fa['train']['1']:g} / {fa['train']['2']:g}, "
                     f"{fa['eval']['1']:g} / {fa['eval']['2']:g} |")
    cal = doc["inputs"]["eval_calibration"]
    chk = cal["check_on_eval_h200_vllm"]
    lines += ["", "## Inputs and checks", "",
              f"- eval step cost: fitted on the decode points ({cal['decode_fit']['base_ms']:.3f} ms a step, "
              f"{cal['decode_fit']['per_ctx_ns']:.1f} ns a context token); that fit predicts eval_h200_vllm.json's "
              f"one-engine run at {chk['decode_fit_predicts_s']:.1f} s against {chk['measured_generation_s']:.1f} s "
              f"measured ({100 * chk['error']:+.1f}%); calibrated on it: {cal['calibrated']['per_ctx_ns']:.1f} ns a "
              f"token, KV reads at {cal['calibrated']['kv_read_tb_per_s']:.2f} TB/s of the H200's 4.8",
              f"- start-ups used (s): {doc['inputs']['startups']['used']}",
              "- files: " + ", ".join(doc["inputs"]["files"]), ""]
    lines += ["Assumptions:", ""] + [f"- {a}" for a in doc["assumptions"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    doc = estimate()
    (RESULTS / "layout_estimate.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(doc)
    (RESULTS / "layout_estimate.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
