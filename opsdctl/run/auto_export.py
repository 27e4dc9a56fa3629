"""`[export]`: the worker writes the current best recipe.env before the budget runs out.

    [export]
    path = "submission/recipe.env"
    minutes_before_deadline = 10

From `minutes_before_deadline` before the budget's end (at once when no deadline is known), the
worker writes the leader's recipe.env to `path`, and again whenever the leader, its verdict or the
runs behind its evidence change (so the header never goes stale), so a session that ends mid-chain still leaves the best known recipe. It starts that
late on purpose: a workspace's own train script often reads its recipe from that very file.

The leader, from the compare report (opsdctl.plan.report.compare_doc, the same numbers `compare`
prints): the highest P(beat) among candidates whose verdict is `better`; else the undecided
candidate with the highest P(beat), provided its estimate is ahead of the baseline (P(beat) >=
0.5: one behind it would be a worse bet than the baseline); else the baseline's empty recipe (an
empty recipe.env reproduces the released recipe). Partial evaluations never lead. The file is
the export-recipe text (opsdctl.recipes.export) under a header with the verdict and its evidence.
What was last written, and when, is kept in the store (Meta `auto_export`) for `opsdctl status`.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from opsdctl.config import export_path
from opsdctl.errors import UserError
from opsdctl.fsutil import atomic_write_text
from opsdctl.plan.budget import BudgetView, fmt_duration
from opsdctl.recipes import knobs

# (the export and the store's write functions are imported where used: `status` reads
# last_written through here and must not import SQLAlchemy)

EXPORT_KEY = "auto_export"  # Meta: JSON of the last write
UNDECIDED_AT = 0.5  # an undecided candidate leads only when its estimate is ahead of the baseline


@dataclass(frozen=True)
class Leader:
    name: str  # the candidate's label ("token-clip @3f2a1c"), or the baseline's name
    variant: Optional[str]  # the variant to export; None: the baseline's empty recipe
    verdict: Optional[str]  # better | undecided | None (baseline)
    entry: Optional[dict]  # its compare entry
    rule: str  # which branch of the rule chose it

    baseline_n: int = 0

    @property
    def key(self) -> str:
        """What a rewrite follows: the leader, its verdict, and the runs behind the evidence."""
        return json.dumps([self.name, self.variant, self.verdict, (self.entry or {}).get("n"), self.baseline_n])


def _rank(e: dict) -> tuple:
    return (e["p_beat"] if e.get("p_beat") is not None else -1.0, e.get("mean") or 0.0)


def pick_leader(report: dict, exportable: Callable[[str], bool] = lambda label: True) -> Leader:
    lead = _pick(report, exportable)
    return Leader(lead.name, lead.variant, lead.verdict, lead.entry, lead.rule,
                  int((report.get("baseline") or {}).get("n") or 0))


def _pick(report: dict, exportable: Callable[[str], bool]) -> Leader:
    """The recipe to submit now, from a compare report. `exportable(variant label)`: False for
    what has no recipe (the base model, a checkpoint trained outside opsdctl)."""
    base = report.get("baseline") or {}
    full = [e for e in report.get("variants", [])
            if not e.get("partial") and e.get("n") and e.get("variants") and exportable(e["variants"][0])]
    better = [e for e in full if e.get("verdict") == "better"]
    if better:
        e = max(better, key=_rank)
        return Leader(e["name"], e["variants"][0], "better", e, "the highest P(beat) among `better`")
    ahead = [e for e in full if e.get("verdict") == "undecided" and (e.get("p_beat") or 0.0) >= UNDECIDED_AT]
    if ahead:
        e = max(ahead, key=_rank)
        return Leader(e["name"], e["variants"][0], "undecided", e,
                      f"no candidate is `better`: the undecided one with the highest P(beat) (>= {UNDECIDED_AT:g})")
    return Leader(base.get("name") or "baseline", None, None, None,
                  "no candidate is `better` and no undecided one is ahead: the baseline's empty recipe")


def _evidence(report: dict, leader: Leader) -> list[str]:
    b, e = report.get("baseline") or {}, leader.entry
    base = (f"{b.get('name') or 'the reference'} {b['mean']:.2f}" if b.get("mean") is not None else "no baseline")
    runs = f"{b.get('n_local') or b.get('n')} run{'s' if (b.get('n_local') or b.get('n')) != 1 else ''} in the store"
    if b.get("n") and b.get("source") == "runs":
        base += f" ({runs})"
    elif b.get("n") and b.get("source") == "runs+reference":
        ref = b.get("reference") or {}
        published = f" {ref['mean']:.2f}" if ref.get("mean") is not None else ""
        base += f" ({runs}, combined with the published mean{published})"
    elif b.get("n"):
        base += f" (the published reference, n = {b['n']})"
    if e is None:
        return [f"evidence: {base}; candidates: " + (", ".join(
            f"{x['name']} {x.get('verdict') or '-'}" + (f" P(beat) {x['p_beat']:.3f}" if x.get("p_beat") is not None else "")
            for x in report.get("variants", []) if not x.get("partial") and x.get("n")) or "none scored")]
    lines = [f"leader: {leader.name}, verdict {leader.verdict}"
             + (f", P(beat baseline) {e['p_beat']:.3f}" if e.get("p_beat") is not None else "")]
    ev = f"evidence: {e['n']} run{'s' if e['n'] != 1 else ''}, mean {e['mean']:.2f} vs {base}"
    if e.get("delta") is not None:
        ev += f"; delta {e['delta']:+.2f}"
    if e.get("ci_low") is not None:
        ev += f", 95% CI [{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]"
    lines.append(ev)
    bon, nz = report.get("bonferroni") or {}, report.get("noise") or {}
    if bon.get("m"):
        lines.append(f"verdicts: Bonferroni over m = {bon['m']}, better at P(beat) >= {bon['better_at']:.4g}"
                     + (f"; noise s = {nz['s']:.2f} points per run" if nz.get("s") is not None else ""))
    if e.get("code") == "live":
        lines.append("code: the live code dir (snapshot_code = false); recipe.env carries only hyper-parameters")
    elif e.get("code"):
        lines.append(f"code: trained with code tree @{e['code']}; recipe.env carries only hyper-parameters, "
                     "so submit that code with it")
    return lines


def render_file(store, report: dict, leader: Leader, when: str, why: str) -> str:
    """The recipe.env text: our header, then export-recipe's own text for the leader."""
    from opsdctl.recipes.export import export_recipe

    head = [f"opsdctl auto-export ([export] in opsdctl.toml) at {when}: {why}",
            f"rule: {leader.rule}"]
    if leader.variant is None:
        head.append(f"leader: {leader.name}, the released recipe (this file sets no key)")
    head += _evidence(report, leader)
    ref = leader.variant
    if ref is None:  # the baseline: its own (empty) export when it is in the store
        versions = store.reader().variants_named((leader.name or "").split("@")[0]) if leader.name else []
        ref = versions[-1].label if versions and versions[-1].kind == "recipe" else None
    if ref is None:
        body = knobs.format_recipe_env({}, ["the released recipe: no key differs from it"])
    else:
        exp = export_recipe(store, ref, force=True)
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


def last_written(reader) -> Optional[dict]:
    """What the exporter wrote last; `reader`: opsdctl.store.reader (`Store.reader()`)."""
    text = reader.get_meta(EXPORT_KEY)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


class AutoExporter:
    """One check (`check`), and a thread that repeats it while the worker runs."""

    def __init__(self, cfg, store, report: Callable[[str], None], budget: Callable[[], BudgetView],
                 every_s: float = 10.0):
        sec = cfg.section("export")
        self.cfg, self.store, self.report, self.budget = cfg, store, report, budget
        self.path = export_path(cfg)
        self.minutes_before = float(sec.get("minutes_before_deadline", 10.0))
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def check(self) -> Optional[dict]:
        """Write the leader's recipe.env if it is time and the leader or its evidence changed (or
        the file is gone); return the record written, or None."""
        from opsdctl.plan.report import compare_doc

        now, why = due(self.budget(), self.minutes_before)
        if not now:
            return None
        from opsdctl.store.engine import set_meta

        reader = self.store.reader()
        report = compare_doc(self.cfg, reader, None, None)
        kinds = {v.label: v.kind for v in reader.all_variants()}
        leader = pick_leader(report, lambda label: kinds.get(label) == "recipe")
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
        e = leader.entry or {}
        record = {"path": str(self.path), "written_at": when, "leader": leader.name, "variant": leader.variant,
                  "verdict": leader.verdict, "p_beat": e.get("p_beat"), "n": e.get("n"), "mean": e.get("mean"),
                  "reason": reason, "key": leader.key}
        with self.store.write() as s:
            set_meta(s, EXPORT_KEY, json.dumps(record))
        self.report(f"export: wrote {self.path} <- {leader.name}"
                    + (f" ({leader.verdict}, P(beat) {e['p_beat']:.3f})" if e.get("p_beat") is not None else
                       f" ({leader.verdict})" if leader.verdict else " (the released recipe)") + f"; {reason}")
        return record

    def _safe_check(self) -> None:
        try:
            self.check()
        except UserError as exc:
            self.report(f"export: skipped: {exc}")
        except Exception as exc:  # never take the worker down over an export; say why and go on
            self.report(f"export: failed: {type(exc).__name__}: {exc}")

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
        self._safe_check()


def exporter_for(cfg, store, report: Callable[[str], None], budget: Callable[[], BudgetView]) -> Optional[AutoExporter]:
    """A started exporter when `[export] path` is set, else None."""
    if not cfg.section("export").get("path"):
        return None
    every = min(10.0, max(0.5, 5 * float(cfg.poll_seconds)))
    return AutoExporter(cfg, store, report, budget, every).start()
