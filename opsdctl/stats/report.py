"""The compare report as typed data: what `opsdctl.stats.compare.build_report` returns.

Every part is a frozen dataclass whose fields are, in order, the keys of its `compare --json`
object; `to_json()` prints that document (plain JSON types, lists for tuples). A field whose
attribute name says more than its historical key carries that key in its metadata (`key`), and a
field the JSON never shows (the forecast's posterior, an object) is marked `json=False`. Fields
that only the command layer adds (`pool_code`, `training`, `advice`) are left out while None.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from opsdctl.stats import forecast


def to_json(x: Any) -> Any:
    """A report part as its JSON value."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        out = {}
        for f in dataclasses.fields(x):
            if not f.metadata.get("json", True):
                continue
            v = getattr(x, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.metadata.get("key", f.name)] = to_json(v)
        return out
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, dict):
        return {k: to_json(v) for k, v in x.items()}
    return x


class _Json:
    def to_json(self) -> dict:
        return to_json(self)


@dataclass(frozen=True)
class Forecast(_Json):
    """The predictive distribution of an arm's official 5-run mean (points); all None when there
    is none (partial entries, no runs, no noise estimate)."""

    mean: Optional[float] = None
    low80: Optional[float] = None
    high80: Optional[float] = None
    p_above_reference: Optional[float] = None
    p_best: Optional[float] = None
    p_above_baseline: Optional[float] = None  # a candidate's P(its official mean beats the baseline's)


NO_FORECAST = Forecast()


@dataclass(frozen=True)
class PriorCheck(_Json):
    """The published sd against the local scatter (opsdctl.stats.inference.PriorCheck), as used."""

    chi2: Optional[float]
    p: Optional[float]
    level: float
    kept: bool
    weight: Optional[float]
    checked: bool


@dataclass(frozen=True)
class Noise(_Json):
    """The pooled run-to-run noise and its split into training and eval sampling."""

    s: Optional[float]
    nu: float
    nu_local: int
    s_local: Optional[float]
    tau2: Optional[float]
    v_eval: Optional[float]
    s0: Optional[float]
    nu0: Optional[float]
    prior_check: Optional[PriorCheck]
    eval_dominates: Optional[bool]
    runs_with_counts: int
    runs_without_counts: int
    note: Optional[str]
    v_eval_note: Optional[str]
    advice: Optional[str]


@dataclass(frozen=True)
class PublishedRef(_Json):
    mean: Optional[float]
    sd: Optional[float]
    n: int
    prior: bool
    offset_sd: Optional[float]


@dataclass(frozen=True)
class ReferenceCheck(_Json):
    """Local baseline runs against the published mean (opsdctl.stats.inference.reference_check)."""

    diff: Optional[float]
    se: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    p: Optional[float]
    significant: bool


@dataclass(frozen=True)
class WouldBuy(_Json):
    runs: int
    se_mean: Optional[float]


@dataclass(frozen=True)
class Baseline(_Json):
    """The baseline arm: its local runs, the published mean, or both."""

    name: Optional[str]
    source: Optional[str]  # "runs" | "runs+reference" | "reference" | None
    n: int
    n_local: int
    mean: Optional[float]
    sd: Optional[float]
    se_mean: Optional[float]
    mean_ci_low: Optional[float]
    mean_ci_high: Optional[float]
    runs: tuple[Optional[float], ...]
    chain_ids: tuple[int, ...]
    code: Optional[str]
    reference: Optional[PublishedRef]
    offset_sd: Optional[float]
    reference_check: Optional[ReferenceCheck]
    local_runs_would_buy: tuple[WouldBuy, ...]
    forecast: Forecast = NO_FORECAST


@dataclass(frozen=True)
class Entry(_Json):
    """A candidate with full runs against the baseline."""

    name: str
    variants: tuple[str, ...]
    code: Optional[str]
    n: int
    mean: Optional[float]
    sd: Optional[float]
    se_delta: Optional[float] = field(metadata={"key": "se"})  # printed as `se`
    delta: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    p_beat: Optional[float]
    verdict: Optional[str]
    runs_needed: Optional[int]
    look: int
    better_at: Optional[float]
    worse_at: Optional[float]
    runs_needed_worse: Optional[int]
    needs_baseline_runs: bool
    runs_needed_both_arms: Optional[int]
    minutes_needed: Optional[float]
    fits: Optional[bool]
    partial: bool
    se_mean: Optional[float]
    mean_ci_low: Optional[float]
    mean_ci_high: Optional[float]
    paired_delta: Optional[float]
    paired_se: Optional[float]
    paired_problems: Optional[int]
    v_eval: Optional[float]
    k: int
    n_problems: int
    runs: tuple[Optional[float], ...]
    chain_ids: tuple[int, ...]
    note: Optional[str]
    forecast: Forecast = NO_FORECAST


@dataclass(frozen=True)
class ScreenReading(_Json):
    """A partial evaluation against the baseline's partial on the same problems."""

    delta: Optional[float]
    se: Optional[float]
    p_effect: Optional[float]
    baseline_runs: int


@dataclass(frozen=True)
class PartialEntry(_Json):
    """Partial evaluations of one candidate at one (problems, k): screening only, no verdict."""

    name: str
    variants: tuple[str, ...]
    code: Optional[str]
    n: int
    mean: Optional[float]
    sd: Optional[float]
    se: Optional[float]  # of its mean: training noise plus its own eval sampling
    delta: Optional[float]
    ci_low: Optional[float]
    ci_high: Optional[float]
    p_beat: Optional[float]
    verdict: Optional[str]
    runs_needed: Optional[int]
    partial: bool
    label: str
    k: int
    n_problems: int
    se_eval: Optional[float]
    vs_baseline: Optional[ScreenReading]
    runs: tuple[Optional[float], ...]
    chain_ids: tuple[int, ...]
    note: str
    forecast: Forecast = NO_FORECAST


@dataclass(frozen=True)
class MissingEntry(_Json):
    """A candidate asked for that has no run."""

    name: str
    n: int = 0
    partial: bool = False
    verdict: Optional[str] = None
    note: str = "no runs"
    forecast: Forecast = NO_FORECAST


@dataclass(frozen=True)
class Looks(_Json):
    """Alpha spent over the looks (opsdctl.stats.sequential)."""

    j_min: int
    j_flat: int
    growth: float
    c: Optional[float]
    min_local_dof: int


@dataclass(frozen=True)
class ErrorSpending(_Json):
    """How the verdicts spend their error: alpha over the m candidates of the family (Bonferroni)
    and over the looks. Printed as `alpha_spending`."""

    m: int
    alpha: float
    family: tuple[str, ...]
    better_at: Optional[float]  # at looks j_min..j_flat
    worse_at: Optional[float]
    looks: Looks


@dataclass(frozen=True)
class Screen(_Json):
    """What a 15x4 screen against the baseline's partial resolves."""

    problems: int
    k: int
    se: Optional[float]
    resolves: Optional[float]


@dataclass(frozen=True)
class ForecastModel(_Json):
    official_runs: int
    spread: Optional[float]
    spread_sd: Optional[float]
    spread_prior: float
    train_var: Optional[float]
    eval_var: Optional[float]
    reference: Optional[float]
    offset_sd: Optional[float]
    arms: tuple[str, ...]
    interval: float
    noise_var: Optional[float] = None  # the run variance estimate the forecast and the submission rule start from
    noise_dof: Optional[float] = None  # its dof (opsdctl.stats.bet.noise_estimate)


@dataclass(frozen=True)
class Budget(_Json):
    chain_minutes: Optional[float]
    minutes_left: Optional[float]


@dataclass(frozen=True)
class Report(_Json):
    """`opsdctl compare`: the baseline, the noise, the candidates ranked, the forecast.

    `posterior` is the forecast's joint posterior (opsdctl.stats.forecast), the one object the
    advice and the belief read (None without a noise estimate); it is not printed."""

    baseline: Baseline
    noise: Noise
    spending: ErrorSpending = field(metadata={"key": "alpha_spending"})
    screen: Optional[Screen]
    forecast_model: Optional[ForecastModel]
    budget: Budget
    full_k: Optional[int]
    full_n: Optional[int]
    notes: tuple[str, ...]
    entries: tuple = field(metadata={"key": "variants"})  # Entry | MissingEntry | PartialEntry
    posterior: Optional[forecast.Posterior] = field(default=None, metadata={"json": False})
    # added by the command layer (opsdctl.plan.store_report.compare_doc)
    pool_code: Optional[bool] = field(default=None, metadata={"omit_none": True})
    training: Optional[tuple] = field(default=None, metadata={"omit_none": True})
    advice: Optional[tuple] = field(default=None, metadata={"omit_none": True})  # opsdctl.plan.advise.Advice

    def to_json(self) -> dict:
        doc = to_json(self)
        if self.advice is not None:  # opsdctl.plan.advise.Advice: its JSON and its sentence
            doc["advice"] = [{**a.to_json(), "text": a.text()} for a in self.advice]
        return doc

    @property
    def full(self) -> tuple[Entry, ...]:
        """The candidates with full runs (ranked)."""
        return tuple(e for e in self.entries if isinstance(e, Entry))

    @property
    def partials(self) -> tuple[PartialEntry, ...]:
        return tuple(e for e in self.entries if isinstance(e, PartialEntry))

    def entry(self, name: str):
        """The entry of candidate `name` (None if it has none)."""
        return next((e for e in self.entries if e.name == name), None)
