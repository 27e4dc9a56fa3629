"""What a reading command knows of the session before it builds a document: read once, passed down.

status, compare and advise each need the time left, the worker's GPU layout, the configured
baseline (a bare name means its latest version) and the stage-duration estimates learned from the
store's history. Each is computed here, once per command, and every part below (the compare
report, its ranked advice, the planner's dry run) reads it from this object instead of asking the
store or the clock again; two answers from two reads a moment apart could disagree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Optional

from opsdctl.plan.budget import BudgetView, budget_now, clock_start
from opsdctl.plan.durations import Estimator, Sample, default_seconds, history
from opsdctl.plan.slots import Layout
from opsdctl.plan.store_facts import known_layout, latest_version


@dataclass(frozen=True)
class ReadContext:
    """One command's view of the session. `budget`: the time left at `now`; `layout`: the worker's
    GPUs and slots as the config and its saved plan say (no GPU is probed); `baseline`: the
    configured baseline's label (latest version of a bare name), `baseline_hparams` its knobs;
    `samples` and `estimator`: the stage durations of the store's history, read on first use."""

    cfg: object
    reader: object = field(repr=False)
    now: float
    budget: BudgetView
    layout: Layout
    baseline: Optional[str]
    baseline_hparams: dict

    @cached_property
    def samples(self) -> list[Sample]:
        return history(self.reader)

    @cached_property
    def estimator(self) -> Estimator:
        return Estimator(self.samples, default_seconds(self.cfg))

    @property
    def minutes_left(self) -> Optional[float]:
        """The usable minutes left (never below 0); None without a budget."""
        usable = self.budget.usable_seconds
        return None if usable is None else max(0.0, usable / 60.0)

    def chain_minutes(self) -> float:
        """Minutes of one train -> eval chain of the baseline's recipe on the worker's layout, for
        "do the runs needed fit": the high estimate admission uses (opsdctl.plan.durations)."""
        lay = self.layout
        train, evaluate = self.estimator.chain(self.cfg.profile, self.baseline_hparams,
                                               gpus=(lay.gpus_of("train"), lay.gpus_of("eval")))
        return (train.high_s + evaluate.high_s) / 60.0

    def with_budget(self, budget: BudgetView) -> "ReadContext":
        """The same view with another budget (status: the deadline a running worker keeps)."""
        return replace(self, budget=budget)


def read_context(cfg, reader, now: Optional[float] = None) -> ReadContext:
    """The session as `cfg` and the store (through `reader`) say at `now` (default: the clock)."""
    now = time.time() if now is None else now
    started = clock_start(reader) if cfg.budget.kind == "hours" else None
    base, variant = latest_version(reader, cfg.baseline_variant)
    hparams = dict(variant.hparams or {}) if variant is not None else {}  # none: not queued yet
    return ReadContext(cfg, reader, now, budget_now(cfg.budget, started, now), known_layout(cfg, reader), base, hparams)
