"""What to submit: the submission rule, on a compare report.

The bet, not the claim: the candidate whose effect over the baseline is most likely large, under a
normal family learned from the session's candidates (opsdctl.stats.bet: why not the forecast's own
mean), provided its P(effect > 0) is at least opsdctl.stats.bet.P_SUBMIT; else the baseline's
empty recipe. The leader's compare forecast (opsdctl.stats.forecast) is what the header states. Partial evaluations and what has no recipe never
lead. `export-recipe --leader`, the worker's `[export]`, `opsdctl demo`, the simulator and the
decision benchmark all call `pick_leader`, so what they score is what a user submits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from opsdctl.stats import bet
from opsdctl.stats.report import NO_FORECAST, Entry, Forecast, Report

RULE_CANDIDATE = f"the highest posterior effect among candidates above the baseline with P >= {bet.P_SUBMIT:.2f}"
RULE_BASELINE = (f"no candidate is above the baseline with P >= {bet.P_SUBMIT:.2f}: "
                 "the baseline's empty recipe")



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
    full = [e for e in report.full if e.variants and exportable(e.variants[0]) and e.mean is not None and e.n]
    e = leading(full, report)
    if e is not None:
        return Leader(e.name, e.variants[0], e.verdict, e, RULE_CANDIDATE, int(base.n or 0), e.forecast)
    return Leader(base.name or "baseline", None, None, None, RULE_BASELINE, int(base.n or 0), base.forecast)


def run_noise(report: Report) -> Optional[tuple[float, Optional[float]]]:
    """(s^2, dof) the rule reads the runs with: the forecast's own estimate (opsdctl.stats.bet.
    noise_estimate, the published sd at its full dof; `forecast_model.noise_var` in compare --json),
    else the verdicts' pooled s; None without any."""
    post = report.posterior
    if post is not None:
        return post.inputs.noise.run_var, post.inputs.noise.dof
    fm = report.forecast_model
    if fm is not None and fm.noise_var is not None:  # a report read back from compare --json
        return fm.noise_var, fm.noise_dof
    if report.noise is not None and report.noise.s is not None:
        return report.noise.s**2, report.noise.nu or None
    return None


def leading(candidates: Sequence[Entry], report: Report) -> Optional[Entry]:
    """Of `candidates` (compare entries with full runs), the one opsdctl.stats.bet.submit submits
    against the report's baseline (its local runs and the published mean, by precision); None: the
    baseline."""
    noise = run_noise(report)
    if not candidates or noise is None:
        return None
    s2, nu = noise
    base = report.baseline
    runs = [y for y in base.runs if y is not None]
    ref = base.reference
    level = bet.baseline_level(sum(runs) / len(runs) if runs else None, len(runs), s2,
                               None if ref is None else ref.mean, 0 if ref is None else int(ref.n),
                               float(base.offset_sd if base.offset_sd is not None else 1.0))
    if level is None:  # nothing to read them against: the highest local mean
        return max(candidates, key=lambda c: c.mean)
    i = bet.submit([c.mean for c in candidates], [c.n for c in candidates], level, s2, nu,
                   tie=[c.forecast.p_best for c in candidates])
    return None if i is None else candidates[i]
