"""The effective-config check: did the train stage run the recipe it was given?

After a train stage, its log is compared with what the variant's recipe asked for:
- the learning rate of the Hugging Face dict lines (`{'loss': ..., 'learning_rate': 5e-06}`),
  and the schedule's shape over the steps (constant / linear / cosine, with warmup) when enough
  steps were logged after the warmup to tell;
- `[modes] teacher_thinking=False student_thinking=False` lines (any knob=value pair);
- the user's `[stages.train.expect]` patterns (knob -> regex with one group).
A value the log shows that disagrees fails the chain: "recipe not applied: log says
learning_rate 5e-06, recipe says 1e-05". Where the log shows nothing to check, the result says
"not verified" and `show` says so.

Pure functions of the log text and the recipe; the worker calls `check_log`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from opsdctl.recipes import knobs
from opsdctl.contract.results import explicit_step, parse_hf_dicts, trainer_bar

VERIFIED, MISMATCH, NOT_VERIFIED = "verified", "mismatch", "not verified"
FIT_TOL = 0.03  # largest gap between a logged learning rate and the schedule's, as a fraction of its peak
MIN_SHAPE_POINTS = 3  # logged learning rates after the warmup needed to tell a schedule's shape
MIN_SHAPE_SPAN = 0.3  # ... spanning at least this fraction of the post-warmup steps
VALUE_RTOL = 1e-4  # numbers the log prints (a pattern's group) may be rounded this much
MODES_RE = re.compile(r"\[modes\]((?:[ \t]+[A-Za-z_][A-Za-z0-9_]*=[^\s]+)+)")
SHAPES = ("constant", "linear", "cosine")
SCALE_NOTE = "(learning_rate_scale)"  # trainer/cli.py's note when a profile scales the learning rate
SCHEDULE_SHAPE = {"constant": "constant", "constant_with_warmup": "constant", "linear": "linear", "cosine": "cosine"}


@dataclass
class RecipeCheck:
    status: str = NOT_VERIFIED
    checked: list[dict] = field(default_factory=list)  # {"knob", "log", "recipe", "ok", "source"}
    unchecked: list[str] = field(default_factory=list)  # why a knob could not be checked
    reason: Optional[str] = None  # the first mismatch, as the chain's failure reason

    def to_dict(self) -> dict:
        return {"status": self.status, "checked": self.checked, "unchecked": self.unchecked, "reason": self.reason}

    def summary(self) -> str:
        if self.status == MISMATCH:
            return self.reason or MISMATCH
        ok = ", ".join(f"{c['knob']} {c['log']}" for c in self.checked)
        if self.status == VERIFIED:
            return f"recipe verified in the train log: {ok}"
        return "recipe not verified: " + ("; ".join(self.unchecked) or "the train log shows none of its values")

    def _add(self, knob: str, log: Any, recipe: Any, ok: bool, source: str, why: str = "") -> None:
        self.checked.append({"knob": knob, "log": log, "recipe": recipe, "ok": ok, "source": source})
        if not ok and self.reason is None:
            self.reason = f"recipe not applied: {why or f'log says {knob} {log!r}, recipe says {recipe!r}'}"


def check_log(log_text: str, hparams: dict, method: dict, *, max_steps: Optional[int], lr_scale: float = 1.0,
              expect: Optional[dict] = None) -> RecipeCheck:
    out = RecipeCheck()
    _check_learning_rate(out, log_text, hparams, max_steps, lr_scale)
    _check_modes(out, log_text, {**hparams, **method})
    _check_expect(out, log_text, {**hparams, **method}, expect or {})
    if out.reason is not None:
        out.status = MISMATCH
    elif out.checked:
        out.status = VERIFIED
    return out


# --- learning rate and schedule -----------------------------------------------------------


def lr_points(log_text: str) -> list[tuple[Optional[int], float]]:
    """(step or None, learning_rate) of every dict line that logs one, in order."""
    out: list[tuple[Optional[int], float]] = []
    bar_step: Optional[int] = None
    for line in re.split(r"[\r\n]", log_text):
        bar = trainer_bar(line)
        if bar is not None:
            bar_step = bar[0]
        if "learning_rate" not in line:
            continue
        for d in parse_hf_dicts(line):
            lr = d.get("learning_rate")
            if "train_runtime" in d or isinstance(lr, bool) or not isinstance(lr, (int, float)):
                continue
            if not math.isfinite(lr):
                continue
            step = explicit_step(d)
            out.append((step if step is not None else bar_step, float(lr)))
    return out


def schedule_factor(shape: str, step: float, warmup: int, total: int) -> float:
    """The multiplier of the peak learning rate at `step` (transformers' schedules)."""
    if warmup and step < warmup:
        return max(0.0, step / warmup)
    if shape == "constant":
        return 1.0
    span = max(1, total - warmup)
    x = min(1.0, max(0.0, (step - warmup) / span))
    return 1.0 - x if shape == "linear" else 0.5 * (1.0 + math.cos(math.pi * x))


def _positions(points: list[tuple[Optional[int], float]], total: Optional[int]) -> Optional[list[float]]:
    """The step of each point: its own step field or the Trainer's bar just before it; one
    point per step when there are exactly as many as steps; else unknown (None): lines are
    never counted to guess steps (logging_steps may be anything)."""
    steps = [s for s, _ in points]
    if all(s is not None for s in steps) and all(a < b for a, b in zip(steps, steps[1:])):
        return [float(s) for s in steps]
    if total and len(points) == total:
        return [float(i) for i in range(1, total + 1)]
    return None


def _fit(obs: list[float], pos: list[float], shape: str, warmup: int, total: int,
         peak: Optional[float]) -> tuple[float, float]:
    """(largest gap / peak, peak) of the best of two alignments (HF logs the rate after a
    step, some trainers the one used by it); peak None = fitted by least squares."""
    best = (math.inf, peak or 0.0)
    for offset in (0.0, 1.0):
        f = [schedule_factor(shape, p - offset, warmup, total) for p in pos]
        a = peak
        if a is None:
            den = sum(x * x for x in f)
            a = sum(o * x for o, x in zip(obs, f)) / den if den > 0 else 0.0
        if a <= 0:
            continue
        gap = max(abs(o - a * x) for o, x in zip(obs, f)) / a
        if gap < best[0]:
            best = (gap, a)
    return best


def _check_learning_rate(out: RecipeCheck, log_text: str, hparams: dict, total: Optional[int], lr_scale: float) -> None:
    if "learning_rate" not in hparams:
        return
    points = lr_points(log_text)
    if not points:
        out.unchecked.append("learning_rate: no Hugging Face dict line in the train log shows it")
        return
    # Our trainer scales the rate on toy profiles and says so in its log; nothing else does.
    peak = float(hparams["learning_rate"]) * (lr_scale if SCALE_NOTE in log_text else 1.0)
    sched = hparams.get("lr_scheduler_type", "constant")
    shape = SCHEDULE_SHAPE.get(sched)
    first = points[0][1]
    if shape is None:
        out.unchecked.append(f"learning_rate: lr_scheduler_type {sched} is not modelled (constant, linear, cosine are)")
        return
    warmup = 0 if sched == "constant" else math.ceil(float(hparams.get("warmup_ratio", 0.0)) * (total or 0))
    obs = [lr for _, lr in points]
    pos = _positions(points, total)
    if pos is None or not total:
        if shape == "constant" and warmup == 0:
            ok = math.isclose(first, peak, rel_tol=1e-3)
            out._add("learning_rate", first, peak, ok, "log")
        else:
            out.unchecked.append("learning_rate: the log does not say which step each learning rate belongs to")
        return
    gap, _ = _fit(obs, pos, shape, warmup, total, peak)
    after = [p for p in pos if p >= warmup + 1]
    shape_visible = len(after) >= MIN_SHAPE_POINTS and (max(after) - min(after)) >= MIN_SHAPE_SPAN * (total - warmup)
    if gap <= FIT_TOL:
        out._add("learning_rate", first, _expected_first(peak, pos[0], shape, warmup, total, first), True, "log")
        if shape_visible:
            out._add("schedule", shape, sched, True, "log")
        elif shape != "constant":
            out.unchecked.append("schedule: too few learning rates logged after the warmup to see its shape")
        return
    # Something differs: the shape, the peak, or both. Fit each shape freely to say which.
    fits = {s: _fit(obs, pos, s, 0 if s == "constant" else warmup, total, None) for s in SHAPES}
    seen = min(fits, key=lambda s: fits[s][0])
    seen_gap, seen_peak = fits[seen]
    if seen_gap > FIT_TOL:
        out.unchecked.append(f"learning_rate: the logged learning rates fit no {'/'.join(SHAPES)} schedule "
                             f"(first {first!r}, recipe peak {peak!r})")
        return
    if seen != shape and shape_visible:
        out._add("schedule", seen, sched, False, "log",
                 why=f"log's learning rates follow a {seen} schedule, recipe says lr_scheduler_type {sched}")
    if not math.isclose(seen_peak, peak, rel_tol=FIT_TOL):
        if seen == "constant":
            out._add("learning_rate", first, peak, False, "log")
        else:
            out._add("learning_rate", _round(seen_peak), peak, False, "log",
                     why=f"log's learning rate peaks at {_round(seen_peak)!r}, recipe says {peak!r}")
    if out.reason is None:  # the shape differs but the log has too few points to say it firmly
        out.unchecked.append("learning_rate: the logged rates do not follow the recipe's schedule; too few to tell how")


def _expected_first(peak: float, pos: float, shape: str, warmup: int, total: int, first: float) -> float:
    """The recipe's learning rate at the first logged step (closest alignment)."""
    cands = [peak * schedule_factor(shape, pos - off, warmup, total) for off in (0.0, 1.0)]
    return _round(min(cands, key=lambda c: abs(c - first)))


def _round(x: float) -> float:
    return float(f"{x:.6g}")


# --- [modes] lines and the user's patterns ------------------------------------------------


def _knob(name: str) -> Optional[knobs.Knob]:
    return knobs.HPARAMS.get(name) or knobs.METHOD_KNOBS.get(name)


def _parse(name: str, text: str) -> Any:
    """A logged value as the knob's type; the text itself when it does not parse."""
    raw = text.strip().strip(",;").strip("'\"")
    knob = _knob(name)
    kind = knob.kind if knob else None
    low = raw.lower()
    if kind is bool or (kind is None and low in ("true", "false")):
        return {"true": True, "1": True, "yes": True, "on": True,
                "false": False, "0": False, "no": False, "off": False}.get(low, raw)
    if kind in (int, float) or kind is None:
        try:
            return int(raw) if kind is int else float(raw)
        except ValueError:
            return raw
    return raw


def _same(log: Any, recipe: Any) -> bool:
    if isinstance(recipe, bool) or isinstance(log, bool):
        return log is recipe or (not isinstance(log, bool) and str(log).lower() == str(recipe).lower())
    if isinstance(recipe, (int, float)) and isinstance(log, (int, float)):
        return math.isclose(float(log), float(recipe), rel_tol=VALUE_RTOL, abs_tol=1e-12)
    return str(log) == knobs.format_value(recipe) if not isinstance(recipe, str) else str(log) == recipe


def _check_modes(out: RecipeCheck, log_text: str, recipe: dict) -> None:
    seen: dict[str, str] = {}
    for m in MODES_RE.finditer(log_text):
        for pair in m.group(1).split():
            key, _, value = pair.partition("=")
            seen.setdefault(key, value)
    if not seen:
        if any(k in recipe for k in ("teacher_thinking", "student_thinking")):
            out.unchecked.append("teacher_thinking, student_thinking: no [modes] line in the train log")
        return
    for key, value in seen.items():
        if key not in recipe:
            continue
        log = _parse(key, value)
        out._add(key, log, recipe[key], _same(log, recipe[key]), "[modes]")


def _check_expect(out: RecipeCheck, log_text: str, recipe: dict, expect: dict) -> None:
    for key, pattern in expect.items():
        if key not in recipe:
            out.unchecked.append(f"{key}: the recipe does not set it")
            continue
        m = re.search(pattern, log_text, re.MULTILINE)
        if m is None or m.group(1) is None:
            out.unchecked.append(f"{key}: [stages.train.expect] pattern {pattern!r} not found in the train log")
            continue
        log = _parse(key, m.group(1))
        out._add(key, log, recipe[key], _same(log, recipe[key]), "expect")
