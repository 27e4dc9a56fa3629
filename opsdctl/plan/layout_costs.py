"""How long a stage takes on k GPUs, relative to the profile's own figure: the one table of layout
factors. The planner's estimates before any history of a layout (opsdctl.plan.durations) and the
simulator's stage durations per layout (opsdctl simulate --gpus-per-chain N) both read it.

A profile's default minutes (opsdctl.recipes.profiles: train_minutes, eval_minutes) are of a
stage on REFERENCE_GPUS GPUs; a stage on k GPUs is expected to take default x FACTORS[stage][k].
Fewer GPUs take longer but cost fewer GPU-minutes: a GPU that samples the whole step's 32 rollouts
takes little more time per token than one that samples 8, and an evaluation on one engine keeps
its batch full where four engines each end on a tail of long samples.

ESTIMATED by benchmarks/layout_estimate.py from H200 measurements of one GPU (its H100 figures:
decode scaled by memory bandwidth, results in benchmarks/results/layout_estimate.json, which a unit
test holds these to); replace with benchmarks/gpu_throughput.py's measured figures when a GPU run
exists. Until then MEASURED stays False and every figure the planner or the simulator derives from
them says so ("default x layout").
A GPU count not in the table is interpolated on log(k); no GPUs (a CPU profile) is 1.
"""

from __future__ import annotations

import math

REFERENCE_GPUS = 4
MEASURED = False  # True once FACTORS hold measured figures (benchmarks/gpu_throughput.py)

FACTORS: dict[str, dict[int, float]] = {
    "train": {1: 1.8, 2: 1.25, 4: 1.0, 8: 0.85},  # estimated (benchmarks/layout_estimate.py, H100)
    "eval": {1: 3.25, 2: 1.75, 4: 1.0, 8: 0.77},  # estimated (benchmarks/layout_estimate.py, H100)
}


def factor(stage: str, gpus: int) -> float:
    """A `stage` on `gpus` GPUs takes this many times the profile's REFERENCE_GPUS-GPU figure."""
    if gpus <= 0 or gpus == REFERENCE_GPUS:
        return 1.0
    table = FACTORS[stage]
    if gpus in table:
        return table[gpus]
    ks = sorted(table)
    lo = max((k for k in ks if k < gpus), default=ks[0])
    hi = min((k for k in ks if k > gpus), default=ks[-1])
    if lo == hi:
        return table[lo]
    w = (math.log(gpus) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp((1 - w) * math.log(table[lo]) + w * math.log(table[hi]))


def gpu_minutes(stage_seconds: dict, stage_gpus: dict) -> float:
    """GPU-minutes of stages: seconds x GPUs held, summed (a stage without GPUs counts its minutes)."""
    return sum(s * max(1, stage_gpus.get(name, 0)) for name, s in stage_seconds.items()) / 60.0
