"""What to submit: the submission rule, on a compare report.

The bet, not the claim: the candidate with the highest forecast of its official 5-run mean
(opsdctl.stats.forecast, shrunk across the family), provided that forecast is above the
baseline's and its P(official mean above the baseline's) is at least opsdctl.stats.bet.P_SUBMIT;
else the baseline's empty recipe (the rule itself: opsdctl.stats.bet.choose). Partial evaluations and what has no recipe never
lead. `export-recipe --leader`, the worker's `[export]`, `opsdctl demo`, the simulator and the
decision benchmark all call `pick_leader`, so what they score is what a user submits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, TypeVar

from opsdctl.stats import bet
from opsdctl.stats.report import NO_FORECAST, Entry, Forecast, Report

RULE_CANDIDATE = f"the highest forecast official mean, above the baseline's with P >= {bet.P_SUBMIT:.2f}"
RULE_BASELINE = (f"no candidate's forecast official mean is above the baseline's with P >= {bet.P_SUBMIT:.2f}: "
                 "the baseline's empty recipe")

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
    """Of `candidates` (each with a forecast: `.mean`, `.p_above_baseline`, `.p_best`), the one
    opsdctl.stats.bet.choose submits (a tie on the mean to the higher p_best); None: the baseline."""
    if not candidates:
        return None
    fs = [forecast_of(c) for c in candidates]
    i = bet.choose([f.mean for f in fs], [getattr(f, "p_above_baseline", None) for f in fs], baseline_mean,
                   tie=[getattr(f, "p_best", None) for f in fs])
    return None if i is None else candidates[i]
