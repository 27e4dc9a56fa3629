"""`[export]`: the worker writes the current best recipe.env before the budget runs out.

    [export]
    path = "submission/recipe.env"
    minutes_before_deadline = 10

From `minutes_before_deadline` before the budget's end (at once when no deadline is known), the
worker writes the leader's recipe.env to `path`, and again whenever the leader, its verdict or the
runs behind its evidence change (so the header never goes stale), so a session that ends mid-chain still leaves the best known recipe. It starts that
late on purpose: a workspace's own train script often reads its recipe from that very file.

The leader (opsdctl.plan.submission.pick_leader, on the compare report: the same numbers `compare`
prints) is the bet, not the claim: the candidate most likely to beat the baseline by the most,
shrunk across the session's candidates so the best-looking of several noisy ones is not taken at
face value (opsdctl.stats.bet), provided its P(effect > 0) clears the threshold; else the
baseline's empty recipe (an empty recipe.env reproduces the released recipe). Partial evaluations
and what has no recipe never lead. The file is the export-recipe text (opsdctl.recipes.export)
under a header with the forecast, its 80% interval, the verdict and its evidence, and, when the
method lives in code, the code tree and how to get it back (`opsdctl code CHAIN --to DIR`).
What was last written, and when, is kept in the store (Meta `auto_export`) for `opsdctl status`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
import time
from typing import Callable, Optional

from opsdctl.config import export_path
from opsdctl.errors import UserError
from opsdctl.fsutil import atomic_write_text
from opsdctl.plan.budget import BudgetView, fmt_duration
from opsdctl.plan.submission import Leader
from opsdctl.recipes import knobs
from opsdctl.stats.report import Baseline, Entry, Forecast, PartialEntry, Report
from opsdctl.store.open_read import open_reader

# (the export and the store's write functions are imported where used: `status` reads
# last_written through here and must not import SQLAlchemy)

EXPORT_KEY = "auto_export"  # Meta: JSON of the last write
BET_KEY = "bet"  # Meta: JSON of the current bet, refreshed before the export is due (status shows it)
BET_EVERY_S = 30.0  # how often the bet is refreshed before the export is due
def _fc_words(f: Forecast) -> str:
    if f.mean is None:
        return "no forecast (no noise estimate yet)"
    text = f"{f.mean:.2f}, 80% interval [{f.low80:.2f}, {f.high80:.2f}]"
    if f.p_above_reference is not None:
        text += f", P(above the published reference) {f.p_above_reference:.2f}"
    return text + f", P(best) {f.p_best:.2f}"


def _evidence(report: Report, leader: Leader) -> list[str]:
    b, e = report.baseline, leader.entry
    runs = report.forecast_model.official_runs if report.forecast_model is not None else 5
    lines = [f"forecast of the official {runs}-run mean: {leader.name} {_fc_words(leader.forecast)}"]
    if e is not None:
        lines.append(f"the baseline's forecast: {_fc_words(b.forecast)}")
    base = (f"{b.name or 'the reference'} {b.mean:.2f}" if b.mean is not None else "no baseline")
    runs = f"{b.n_local or b.n} run{'s' if (b.n_local or b.n) != 1 else ''} in the store"
    if b.n and b.source == "runs":
        base += f" ({runs})"
    elif b.n and b.source == "runs+reference":
        published = f" {b.reference.mean:.2f}" if b.reference is not None and b.reference.mean is not None else ""
        base += f" ({runs}, combined with the published mean{published})"
    elif b.n:
        base += f" (the published reference, n = {b.n})"
    if e is None:
        lines.append(f"evidence: {base}; candidates: " + (", ".join(
            f"{x.name} forecast {x.forecast.mean:.2f}" if x.forecast.mean is not None else f"{x.name} -"
            for x in report.full) or "none scored"))
        return lines
    lines.append(f"leader: {leader.name}, verdict {leader.verdict or '-'}"
                 + (f", P(beat baseline) {e.p_beat:.3f}" if e.p_beat is not None else ""))
    ev = f"evidence: {e.n} run{'s' if e.n != 1 else ''}, mean {e.mean:.2f} vs {base}"
    if e.delta is not None:
        ev += f"; delta {e.delta:+.2f}"
    if e.ci_low is not None:
        ev += f", 95% CI [{e.ci_low:+.2f}, {e.ci_high:+.2f}]"
    lines.append(ev)
    sp, nz = report.spending, report.noise
    if sp.m:
        lines.append(f"verdicts: Bonferroni over m = {sp.m}, better at P(beat) >= {sp.better_at:.4g}"
                     + (f"; noise s = {nz.s:.2f} points per run" if nz.s is not None else ""))
    return lines


def trained_code(e: Entry | PartialEntry, b: Baseline):
    """Where a candidate's method lives, as its export header says it (a
    opsdctl.recipes.export.TrainedCode): its code tree beside the baseline's, and its latest chain
    for `opsdctl code`."""
    from opsdctl.recipes.export import TrainedCode

    return TrainedCode(e.code, e.chain_ids[-1] if e.chain_ids else None, b.code)


def render_file(store, report: Report, leader: Leader, when: str, why: str,
                source: str = "opsdctl auto-export ([export] in opsdctl.toml)") -> str:
    """The recipe.env text: our header, then export-recipe's own text for the leader."""
    from opsdctl.recipes.export import export_recipe

    head = [f"{source} at {when}: {why}", f"rule: {leader.rule}"]
    if leader.variant is None:
        head.append(f"leader: {leader.name}, the released recipe (this file sets no key)")
    head += _evidence(report, leader)
    ref = leader.variant
    if ref is None:  # the baseline: its own (empty) export when it is in the store
        versions = open_reader(store).variants_named((leader.name or "").split("@")[0]) if leader.name else []
        ref = versions[-1].label if versions and versions[-1].kind == "recipe" else None
    if ref is None:
        body = knobs.format_recipe_env({}, ["the released recipe: no key differs from it"])
    else:
        exp = export_recipe(store, ref, force=True,
                            trained=None if leader.entry is None else trained_code(leader.entry, report.baseline))
        body = exp.recipe_env
        if exp.warning():
            head.append("warning: " + exp.warning())
    return "".join(f"# {line}\n" for line in head) + body


def due(view: BudgetView, minutes_before: float) -> tuple[bool, str]:
    """(write now?, why) from the budget: within `minutes_before` of its end, or no end known."""
    if view.seconds_left is None:
        return True, "no deadline known"
    left = view.seconds_left
    if left <= minutes_before * 60.0:
        return True, f"{fmt_duration(max(0.0, left))} before the deadline"
    return False, f"starts {minutes_before:g} min before the deadline (in {fmt_duration(left - minutes_before * 60)})"


def current_bet(reader) -> Optional[dict]:
    """The bet the worker computed last before the export was due: {leader, variant, forecast}."""
    text = reader.get_meta(BET_KEY)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def last_written(reader) -> Optional[dict]:
    """What the exporter wrote last; `reader`: opsdctl.store.reader (`open_reader(store)`)."""
    text = reader.get_meta(EXPORT_KEY)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


class AutoExporter:
    """One check (`check`), and a thread that repeats it while the worker runs. With no `[export]
    path` (`path` None) the check only keeps the bet current."""

    def __init__(self, cfg, store, report: Callable[[str], None], budget: Callable[[], BudgetView],
                 every_s: float = 10.0):
        sec = cfg.section("export")
        self.cfg, self.store, self.report, self.budget = cfg, store, report, budget
        self.path = export_path(cfg)
        self.minutes_before = float(sec.get("minutes_before_deadline", 10.0))
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bet_at = -math.inf
        self._said: Optional[str] = None

    def check(self) -> Optional[dict]:
        """Write the leader's recipe.env if it is time and the leader or its evidence changed (or
        the file is gone); return the record written, or None."""
        from opsdctl.plan.store_report import store_leader, store_report
        from opsdctl.store import outbox
        from opsdctl.store.engine import set_meta

        now, why = due(self.budget(), self.minutes_before) if self.path is not None else (False, "")
        if not now and time.monotonic() - self._bet_at < BET_EVERY_S:
            return None
        reader = open_reader(self.store)
        report = store_report(self.cfg, reader)
        leader = store_leader(reader, report)
        if not now:  # no file to write (yet): keep the bet current for `status`
            self._bet_at = time.monotonic()
            bet = json.dumps({"leader": leader.name, "variant": leader.variant, "forecast": leader.forecast.to_json()})
            if reader.get_meta(BET_KEY) != bet:  # written only when it changed
                with self.store.write() as s:
                    set_meta(s, BET_KEY, bet)
            return None
        last = last_written(reader)
        if last and last.get("key") == leader.key and last.get("path") == str(self.path) and self.path.is_file():
            return None
        if not last or last.get("path") != str(self.path) or not self.path.is_file():
            reason = why
        elif last.get("leader") != leader.name or last.get("verdict") != leader.verdict:
            reason = f"the leader changed; {why}"
        else:
            reason = f"new runs behind the evidence; {why}"
        when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        text = render_file(self.store, report, leader, when, reason)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, text)
        e = leader.entry
        record = {"path": str(self.path), "written_at": when, "leader": leader.name, "variant": leader.variant,
                  "verdict": leader.verdict, "p_beat": None if e is None else e.p_beat, "n": None if e is None else e.n,
                  "mean": None if e is None else e.mean,
                  "forecast": leader.forecast.to_json(), "reason": reason, "key": leader.key}
        with self.store.write() as s:
            set_meta(s, EXPORT_KEY, json.dumps(record))
            outbox.record(s, outbox.EventKind.EXPORT_WRITTEN, f"export:{when}:{leader.key}",  # [notify]
                          {k: v for k, v in record.items() if k != "key"})
        fm = leader.forecast.mean
        self.report(f"export: wrote {self.path} <- {leader.name}"
                    + (" (the released recipe)" if leader.variant is None else "")
                    + (f" (forecast {fm:.2f} [{leader.forecast.low80:.2f}, {leader.forecast.high80:.2f}])"
                       if fm is not None else "") + f"; {reason}")
        return record

    def _safe_check(self) -> None:
        try:
            self.check()
        except UserError as exc:
            self._say(f"skipped: {exc}")
        except Exception as exc:  # never take the worker down over an export; say why and go on
            self._say(f"failed: {type(exc).__name__}: {exc}")

    def _say(self, text: str) -> None:
        """Once per distinct message: a bad config would otherwise repeat it at every check."""
        line = f"{'export' if self.path is not None else 'bet'}: {text}"
        if line != self._said:
            self._said = line
            self.report(line)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._safe_check()
            self._stop.wait(self.every_s)

    def start(self) -> "AutoExporter":
        self._thread = threading.Thread(target=self._run, name="opsdctl-auto-export", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, then check once more: the last chain's score may have moved the leader."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._bet_at = -math.inf  # the last chain's score counts for the bet too
        self._safe_check()


def exporter_for(cfg, store, report: Callable[[str], None], budget: Callable[[], BudgetView]) -> AutoExporter:
    """A started exporter. Without `[export] path` it writes no file and only keeps the bet
    current in the store (what `status` shows: what `export-recipe --leader` would submit now)."""
    every = min(10.0, max(0.5, 5 * float(cfg.poll_seconds)))
    return AutoExporter(cfg, store, report, budget, every).start()
