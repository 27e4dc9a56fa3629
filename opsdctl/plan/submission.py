"""What to submit: the submission rule, on a compare report.

The bet, not the claim: the candidate with the highest forecast of its official 5-run mean
(opsdctl.stats.forecast, shrunk across the family), provided that forecast is above the
baseline's; else the baseline's empty recipe. Partial evaluations and what has no recipe never
lead. `export-recipe --leader`, the worker's `[export]`, `opsdctl demo`, the simulator and the
decision benchmark all call `pick_leader`, so what they score is what a user submits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, TypeVar

from opsdctl.stats.report import NO_FORECAST, Entry, Forecast, Report

RULE_CANDIDATE = "the highest forecast official mean, above the baseline's"
RULE_BASELINE = "no candidate's forecast official mean is above the baseline's: the baseline's empty recipe"

T = TypeVar("T")


@dataclass(frozen=True)
class Leader:
    name: str  # the candidate's label ("token-clip @3f2a1c"), or the baseline's name
    variant: Optional[str]  # the variant to export; None: the baseline's empty recipe
    verdict: Optional[str]  # its compare verdict (better | undecided | worse), None for the baseline
    entry: Optional[Entry]  # its compare entry
    rule: str  # which branch of the rule chose it

    baseline_n: int = 0
    forecast: Forecast = NO_FORECAST  # the leader's compare forecast (the baseline's, for the baseline)

    @property
    def key(self) -> str:
        """What a rewrite follows: the leader, its verdict, the runs behind the evidence, and its
        forecast (to the hundredth of a point)."""
        mean = self.forecast.mean
        return json.dumps([self.name, self.variant, self.verdict, self.entry.n if self.entry else None, self.baseline_n,
                           None if mean is None else round(mean, 2)])


def pick_leader(report: Report, exportable: Callable[[str], bool] = lambda label: True) -> Leader:
    """The recipe to submit now, from a compare report (the rule above). `exportable(variant label)`:
    False for what has no recipe (the base model, a checkpoint trained outside opsdctl)."""
    base = report.baseline
    full = [e for e in report.full if e.variants and exportable(e.variants[0]) and e.forecast.mean is not None]
    e = leading(full, lambda e: e.forecast, base.forecast.mean)
    if e is not None:
        return Leader(e.name, e.variants[0], e.verdict, e, RULE_CANDIDATE, int(base.n or 0), e.forecast)
    return Leader(base.name or "baseline", None, None, None, RULE_BASELINE, int(base.n or 0), base.forecast)


def leading(candidates: Sequence[T], forecast_of: Callable[[T], object], baseline_mean: Optional[float]) -> Optional[T]:
    """The rule itself: of `candidates` (each with a forecast: `.mean`, `.p_best`), the highest
    forecast mean, a tie to the higher p_best, if it is above the baseline's mean (or there is none
    to beat); None: the baseline."""
    if not candidates:
        return None
    best = max(candidates, key=lambda c: (forecast_of(c).mean, forecast_of(c).p_best or 0.0))
    return best if baseline_mean is None or forecast_of(best).mean > baseline_mean else None
