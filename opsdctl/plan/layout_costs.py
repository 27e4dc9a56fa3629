"""How long a stage takes on k GPUs, relative to the profile's own figure: the one table of layout
factors. The planner's estimates before any history of a layout (opsdctl.plan.durations) and the
simulator's stage durations per layout (opsdctl simulate --gpus-per-chain N) both read it.

A profile's default minutes (opsdctl.recipes.profiles: train_minutes, eval_minutes) are of a
stage on REFERENCE_GPUS GPUs; a stage on k GPUs is expected to take default x FACTORS[stage][k].
Fewer GPUs take longer but cost fewer GPU-minutes: a GPU that samples the whole step's 32 rollouts
takes little more time per token than one that samples 8, and an evaluation on one engine keeps
its batch full where four engines each end on a tail of long samples.

MEASURED on one H100 by benchmarks/gpu_throughput.py (benchmarks/results/throughput_h100.json,
which a unit test holds these to): training at 1 and 4 GPUs measured (2 interpolated on rows per
GPU), evaluations predicted at real lengths by the engine model calibrated on that GPU. Checked on
held-out runs at scaled lengths, that model's wall was 6% long for a 4-GPU share and 30% long for a
whole evaluation on one engine, so the 1-GPU eval factor is likely high (about 2.7 with that
correction): the planner errs towards admitting less. 8 GPUs were not run: that column is the
estimate of benchmarks/layout_estimate.py.
A GPU count not in the table is interpolated on log(k); no GPUs (a CPU profile) is 1.
"""

from __future__ import annotations

import math

REFERENCE_GPUS = 4
MEASURED = True  # FACTORS hold figures from a GPU run (benchmarks/gpu_throughput.py); 8 GPUs estimated

FACTORS: dict[str, dict[int, float]] = {
    "train": {1: 1.98, 2: 1.32, 4: 1.0, 8: 0.85},  # H100 measured; 8: estimated
    "eval": {1: 3.32, 2: 1.73, 4: 1.0, 8: 0.77},  # H100 engine model; 8: estimated
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
