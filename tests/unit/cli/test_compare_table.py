"""compare's first screen (opsdctl.cli.compare_table) on a report built from plain records: the
answer in its first two lines, then one table that fits 100 columns, the notes only with explain."""

from __future__ import annotations

import io

from rich.console import Console

from opsdctl.cli.compare_table import render_compare
from opsdctl.plan.submission import pick_leader
from opsdctl.stats.compare import Reference, RunRecord, build_report

REF = Reference(mean=54.22, sd=1.48, n=5)
NAMES = ["token-clip @3f2a1c", "cosine", "lr-1e-5", "hard-data", "long-trace", "ema", "left-pad"]


def _report():
    runs = [RunRecord("baseline", i, 54.0 + i % 3, 12, 30, None, None, False) for i in range(3)]
    for j, name in enumerate(NAMES):
        runs += [RunRecord(name, 10 * (j + 1) + i, 53.0 + j * 0.7 + i, 12, 30, None, None, False) for i in range(2)]
    return build_report(runs, baseline="baseline", reference=REF, chain_minutes=45.0, minutes_left=300.0)


def _text(report, explain=False, width=100) -> str:
    con = Console(file=io.StringIO(), width=width, record=True, color_system=None, soft_wrap=True)
    render_compare(report, con, explain=explain, submit=pick_leader(report))
    return con.export_text()


def test_the_first_screen_leads_with_the_pick_and_fits_100_columns():
    report = _report()
    lead = pick_leader(report)
    lines = _text(report).splitlines()
    assert lines[0].startswith(f"Submit now: {lead.name}, forecast {lead.forecast.mean:.2f} ")
    assert max(len(line) for line in lines) <= 100 and "…" not in "".join(lines)
    header = next(i for i, line in enumerate(lines) if line.startswith("candidate "))
    assert "P(beat)" in lines[header] and "forecast [80%]" in lines[header] and "to settle" in lines[header]
    rows = lines[header + 2:]
    assert all(sum(r.startswith(f"{n} ") for r in rows) == 1 for n in ["baseline", *NAMES])  # whole names
    assert "Noise:" not in "\n".join(lines) and lines[-1].endswith("opsdctl compare --explain")


def test_explain_adds_the_notes_after_the_same_table():
    report = _report()
    short, full = _text(report), _text(report, explain=True)
    table = short.splitlines()[:-1]  # everything but the pointer to --explain
    assert full.splitlines()[:len(table)] == table
    assert "Noise: s =" in full and "Bonferroni" in full and "to settle:" in full and "P(best)" in full


def test_the_released_recipe_leads_when_no_forecast_beats_the_baselines():
    runs = [RunRecord("baseline", i, 56.0 + i % 2, 12, 30, None, None, False) for i in range(4)]
    runs += [RunRecord("worse", 10 + i, 50.0 + i, 12, 30, None, None, False) for i in range(2)]
    report = build_report(runs, baseline="baseline", reference=REF)
    assert _text(report).startswith("Submit now: the released recipe (baseline), forecast ")
