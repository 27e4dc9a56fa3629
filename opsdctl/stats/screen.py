"""Reading a screen: a partial evaluation (fewer problems x samples) against the baseline's partial
on the same problems.

Both arms' partial scores share the problem subset, so their difference estimates the candidate's
effect without the subset's difficulty; its variance is the candidate's training noise plus both
partials' eval sampling (a run's eval-sampling variance scales as 1 / (problems x samples)). With
one baseline partial: SE^2 = tau^2 + 2 v_eval x (full samples / screen samples). P(full-eval
effect > 0) shrinks the screen's delta toward the family's prior N(0, DEFAULT_FAMILY_SD^2) (the
subset's own deviation from the full benchmark is left out: the SE is a lower bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCREEN = (15, 4)  # problems x samples of a screen (`queue --partial 15x4`)
DEFAULT_FAMILY_SD = 2.0  # points: an idea's effect before any run, for small families
SCREEN_Z = 1.6448536269514722 + 0.8416212335729143  # one-sided 5% test with 80% power


@dataclass(frozen=True)
class ScreenReading:
    delta: float  # candidate partial mean - baseline partial mean, points
    se: float
    p_effect: float  # P(full-eval effect > 0 | the screen)


def screen_se(tau2: float, v_eval: float, sample_share: float) -> float:
    """SE of one screen's delta against one baseline partial (share: screen / full samples)."""
    return math.sqrt(tau2 + 2.0 * v_eval / sample_share)


def screen_reading(delta: float, se: float, prior_sd: float = DEFAULT_FAMILY_SD) -> ScreenReading:
    """The screen's delta, SE and P(effect > 0) under the family's normal prior."""
    if se <= 0.0:
        return ScreenReading(delta, se, 1.0 if delta > 0 else 0.0 if delta < 0 else 0.5)
    post_var = 1.0 / (1.0 / prior_sd**2 + 1.0 / se**2)
    post_mean = post_var * delta / se**2
    return ScreenReading(delta, se, 0.5 * math.erfc(-post_mean / math.sqrt(post_var) / math.sqrt(2.0)))
