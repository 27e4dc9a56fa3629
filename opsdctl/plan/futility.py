"""Early stop of a losing evaluation (futility), from the evaluator's look records.

The evaluator appends, when every problem has k of its K samples (k = 4 and 8 of 12),
`{"done", "total", "look_k": k, "problems": [{"id", "correct", "samples"}]}` to progress.jsonl.
At a look, with the counts so far:

    delta_k = y_k - ybar_b                       y_k = run_score(counts, k)
    SE_k^2  = tau^2 + V_eval(k) + s^2 / n_b      V_eval(k) = eval_variance(counts, k)
    stop    if delta_k + z SE_k < 0,             z = z_{1 - 0.05/3} = 2.13

(tau^2: training variance, s^2: pooled run-to-run variance, n_b, ybar_b: the baseline, all
from the compare report when the eval starts). Bonferroni over the 3 looks (k = 4, 8, 12) keeps
the chance of stopping a true winner's evaluation at <= 5%. Without a noise split (no
per-problem counts yet) tau^2 is taken as s^2, its upper bound: a wider SE, fewer stops.

The math is opsdctl.stats.inference (futility_z, futility_se, futility_stop, run_score, eval_variance);
this module only reads a look record and a report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from opsdctl.stats import inference


@dataclass(frozen=True)
class FutilityContext:
    """What a look is judged against: the baseline and the noise, taken from a compare report."""

    baseline_mean: float
    n_b: int
    s2: float
    tau2: float

    @classmethod
    def from_report(cls, report) -> Optional["FutilityContext"]:
        """From a compare report (opsdctl.stats.report.Report); None without a baseline mean or noise."""
        if report is None:
            return None
        b, nz = report.baseline, report.noise
        if b.mean is None or not b.n or nz.s is None:
            return None
        s2 = float(nz.s) ** 2
        tau2 = float(nz.tau2) if nz.tau2 is not None else s2
        return cls(float(b.mean), int(b.n), s2, tau2)


@dataclass(frozen=True)
class Look:
    k: int
    n_problems: int
    score: float
    delta: float
    se: float
    bound: float  # delta + z SE
    stop: bool

    def reason(self) -> str:
        return (f"futile at k={self.k} ({self.n_problems} problems): delta {self.delta:+.2f} + "
                f"{inference.futility_z():.2f} x SE {self.se:.2f} = {self.bound:+.2f} < 0")


def look_counts(record: dict) -> Optional[tuple[list[int], int]]:
    """(counts, k) of a look record, or None when it is not one (or is malformed).
    Every problem must have the same number of samples k >= 2 (V_eval needs k - 1 > 0)."""
    problems = record.get("problems")
    if not isinstance(problems, list) or not problems:
        return None
    try:
        counts = [int(p["correct"]) for p in problems]
        samples = {int(p["samples"]) for p in problems}
    except (KeyError, TypeError, ValueError):
        return None
    if len(samples) != 1:
        return None
    k = samples.pop()
    if k < 2 or any(c < 0 or c > k for c in counts):
        return None
    return counts, k


def judge_look(record: dict, ctx: FutilityContext) -> Optional[Look]:
    """The futility rule on one look record; None when the record is not a usable look."""
    got = look_counts(record)
    if got is None:
        return None
    counts, k = got
    y = inference.run_score(counts, k)
    v = inference.eval_variance(counts, k)
    delta = y - ctx.baseline_mean
    se = inference.futility_se(ctx.tau2, v, ctx.s2, ctx.n_b)
    z = inference.futility_z()
    return Look(k, len(counts), y, delta, se, delta + z * se, inference.futility_stop(delta, se, z))
