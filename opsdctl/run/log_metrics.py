"""Training statistics a user declares: `[stages.train.metrics]` name -> regex with one numeric group.

Every match in the train log lands in the per-step curve (under its name) and in the summary
(`metrics`: mean, last value, steps seen). Two names mean what the store already has columns for:
`kl` fills the run's mean KL and `frac_clipped` its fraction clipped, so `show` and compare's
training columns work for any script, e.g. for the released OPSD code's line

    [OPSD kl] step 26: mean per-token KL(T||S)=0.0979 ... frac above tau=0.353
    kl = 'KL\\(T\\|\\|S\\)=([0-9.eE+-]+)'   frac_clipped = 'frac above tau=([0-9.eE+-]+)'

The step a match belongs to: the line's own `step N` when it has one; else the step after the
Hugging Face Trainer bar's last count (the bar counts finished steps, so a line printed meanwhile
belongs to the next); else the match's rank (1, 2, ...). Dict lines that carry no step of their
own are numbered from those steps (`_number_logged_points`). Several matches of one name at one step
(one per process or micro-batch) are averaged. What the user declared wins over what the worker
guessed from dict keys.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence

from opsdctl.run.results import MAX_LINE, TrainSummary, trainer_bar

STEP_RE = re.compile(r"\bstep\s*[=:#]?\s*(\d+)\b", re.IGNORECASE)
SPECIAL = {"kl": "mean_kl", "frac_clipped": "frac_clipped"}  # names that fill a summary column


def _number(text: str) -> Optional[float]:
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return x if x == x and abs(x) != float("inf") else None


def scan(log_text: str, patterns: Sequence[tuple[str, str]]) -> dict[int, dict[str, float]]:
    """{step: {name: mean of that step's matches}} for every declared metric found in the log."""
    compiled = [(name, re.compile(rx)) for name, rx in patterns]
    if not compiled:
        return {}
    sums: dict[int, dict[str, list[float]]] = {}
    rank = {name: 0 for name, _ in compiled}
    bar_step: Optional[int] = None
    for line in re.split(r"[\r\n]", log_text):
        line = line[:MAX_LINE]
        bar = trainer_bar(line)
        if bar is not None:
            bar_step = bar[0]
        explicit = STEP_RE.search(line)
        for name, rx in compiled:
            for m in rx.finditer(line):
                value = _number(m.group(1))
                if value is None:
                    continue
                rank[name] += 1
                if explicit is not None:
                    step = int(explicit.group(1))
                elif bar_step is not None:
                    step = bar_step + 1
                else:
                    step = rank[name]
                sums.setdefault(step, {}).setdefault(name, []).append(value)
    return {step: {n: sum(v) / len(v) for n, v in by_name.items()} for step, by_name in sorted(sums.items())}


def merge(summary: Optional[TrainSummary], per_step: dict[int, dict[str, float]],
          names: Iterable[str]) -> Optional[TrainSummary]:
    """The summary with the declared metrics merged into its curve and its `metrics`."""
    names = list(names)
    if not per_step:
        return summary
    summary = summary if summary is not None else TrainSummary(source="log")
    _number_logged_points(summary.curve, max(per_step))
    by_step = {p["step"]: p for p in summary.curve if isinstance(p.get("step"), int)}
    for step, values in per_step.items():
        point = by_step.get(step)
        if point is None:
            point = by_step[step] = {"step": step}
            summary.curve.append(point)
        point.update(values)
    stepless = [p for p in summary.curve if not isinstance(p.get("step"), int)]
    summary.curve = sorted((p for p in summary.curve if isinstance(p.get("step"), int)), key=lambda p: p["step"]) + stepless
    metrics = dict(summary.metrics or {})
    for name in names:
        series = [v[name] for _, v in sorted(per_step.items()) if name in v]
        if not series:
            continue
        metrics[name] = {"mean": sum(series) / len(series), "last": series[-1], "steps": len(series)}
        if name in SPECIAL:
            setattr(summary, SPECIAL[name], metrics[name]["mean"])
    summary.metrics = metrics
    summary.source = "+".join(x for x in (summary.source, "[stages.train.metrics]") if x)
    if summary.steps is None:
        summary.steps = max(per_step)
    return summary


def _number_logged_points(curve: list[dict], last_step: int) -> None:
    """Dict lines without a step (no bar, no step field) get one from the declared metrics'
    steps, by the Trainer's rule: with n lines over `last_step` steps, line i was logged at step
    i * last_step / n (logging_steps = last_step / n). Left alone when that is not a whole number."""
    if not curve or any(isinstance(p.get("step"), int) for p in curve) or last_step % len(curve):
        return
    every = last_step // len(curve)
    for i, point in enumerate(curve, 1):
        point["step"] = i * every


def apply(summary: Optional[TrainSummary], log_text: str, patterns: Sequence[tuple[str, str]]) -> Optional[TrainSummary]:
    return merge(summary, scan(log_text, patterns), [n for n, _ in patterns])
