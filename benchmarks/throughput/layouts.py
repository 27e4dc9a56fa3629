"""Chains per session for each GPU layout, from measured step times and eval times: pure arithmetic.

A chain is 100 optimizer steps of global batch 32, then an evaluation of 30 problems x 12
samples. With `gpus_per_chain` = g on a host of G GPUs, G / g chains run at once, each on its
own g GPUs: each of its g training processes does 32 / g rows a step (a rank's share, measured
on one GPU), and its evaluation runs one engine per GPU. A chain holds its g GPUs from the start
of its train stage to the end of its eval stage, so its GPU-minutes are g x its wall minutes.

Per chain: train wall = start-up (process start -> engine ready) + step 1 + 99 steady steps +
the trainer's exit; eval wall = the engine's start after the go (the evaluator is pre-started, so
its imports overlap training) + the generation. The first engine start of each kind on a fresh
host compiles (cold); later ones read the compile cache (warm): a session pays the difference
once, on the slot that starts first. Each slot then runs whole chains back to back.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

STEPS = 100
GLOBAL_BATCH = 32
PER_DEVICE = 4
SESSION_MINUTES = 360.0
HOST_GPUS = 4


@dataclass(frozen=True)
class TrainShare:
    """One GPU's part of a training step: rows = per-device batch x accumulation."""

    rows: int
    step_s: float  # steady state: median over steps 2..n
    first_step_s: float
    rollout_s: float  # steady means
    train_s: float
    source: str  # "measured" or "interpolated from N and M rows"


@dataclass(frozen=True)
class Startups:
    train_ready_s: float  # process start -> trainer and rollout engine ready (warm cache)
    train_exit_s: float  # last step -> the process gone
    eval_ready_s: float  # the go -> engine ready (warm cache; pre-started: imports done before)
    cold_extra_s: float  # paid once a session: cold minus warm starts of both stages


@dataclass(frozen=True)
class LayoutDurations:
    """What the planner and the simulator need of a layout: per chain, wall and GPU minutes."""

    gpus_per_chain: int
    concurrent_chains: int
    train_rows_per_gpu: int
    train_wall_min: float
    train_gpu_min: float
    eval_wall_min: float
    eval_gpu_min: float
    chain_wall_min: float
    chain_gpu_min: float
    chains_per_6h: int  # whole chains on HOST_GPUS GPUs in SESSION_MINUTES
    chains_per_6h_fluid: float  # the rate without rounding to whole chains per slot
    train_source: str
    eval_source: str

    def to_json(self) -> dict:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def interpolate_share(rows: int, low: TrainShare, high: TrainShare) -> TrainShare:
    """A share between two measured ones, each phase linear in rows: rollouts of 8 to 32 prompts
    and the training micro-steps (one per 4 rows) both grow about linearly in this range."""
    if not low.rows < high.rows:
        raise ValueError(f"interpolate between a smaller and a larger share (got {low.rows} and {high.rows} rows)")
    f = (rows - low.rows) / (high.rows - low.rows)

    def lerp(a: float, b: float) -> float:
        return a + f * (b - a)

    rollout, train = lerp(low.rollout_s, high.rollout_s), lerp(low.train_s, high.train_s)
    return TrainShare(rows, rollout + train, lerp(low.first_step_s, high.first_step_s), rollout, train,
                      f"interpolated from {low.rows} and {high.rows} rows")


def rows_per_gpu(gpus_per_chain: int, global_batch: int = GLOBAL_BATCH) -> int:
    if global_batch % gpus_per_chain:
        raise ValueError(f"{gpus_per_chain} GPUs per chain do not divide the global batch of {global_batch}")
    return global_batch // gpus_per_chain


def chains_in_session(slots: int, chain_min: float, usable_min: float) -> tuple[int, float]:
    """Whole chains `slots` slots finish back to back in `usable_min` minutes, and the rate without
    rounding to whole chains per slot (what a session could average with chains of other lengths)."""
    if chain_min <= 0:
        return 0, 0.0
    return slots * max(0, math.floor(usable_min / chain_min)), slots * max(0.0, usable_min) / chain_min


def layout_durations(gpus_per_chain: int, share: TrainShare, eval_generation_s: float, starts: Startups,
                     eval_source: str, *, global_batch: int = GLOBAL_BATCH, host_gpus: int = HOST_GPUS,
                     session_min: float = SESSION_MINUTES, steps: int = STEPS) -> LayoutDurations:
    """One layout's chain: `share` is one GPU's part of a step (global_batch / gpus_per_chain rows),
    `eval_generation_s` the evaluation's generation on gpus_per_chain engines."""
    if share.rows != rows_per_gpu(gpus_per_chain, global_batch):
        raise ValueError(f"{gpus_per_chain} GPUs per chain need a share of {rows_per_gpu(gpus_per_chain, global_batch)} "
                         f"rows per GPU, not {share.rows}")
    slots = host_gpus // gpus_per_chain
    train_s = starts.train_ready_s + share.first_step_s + (steps - 1) * share.step_s + starts.train_exit_s
    eval_s = starts.eval_ready_s + eval_generation_s
    chain_min = (train_s + eval_s) / 60
    whole, fluid = chains_in_session(slots, chain_min, session_min - starts.cold_extra_s / 60)
    return LayoutDurations(
        gpus_per_chain=gpus_per_chain, concurrent_chains=slots, train_rows_per_gpu=share.rows,
        train_wall_min=train_s / 60, train_gpu_min=gpus_per_chain * train_s / 60,
        eval_wall_min=eval_s / 60, eval_gpu_min=gpus_per_chain * eval_s / 60,
        chain_wall_min=chain_min, chain_gpu_min=gpus_per_chain * chain_min,
        chains_per_6h=whole, chains_per_6h_fluid=fluid,
        train_source=share.source, eval_source=eval_source)
