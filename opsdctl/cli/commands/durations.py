"""`opsdctl durations`: stage duration estimates from history, and how they compared with what ran."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console


def command(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print estimates and estimate-vs-actual as JSON."),
    recent: int = typer.Option(20, "--recent", "-r", min=0, help="How many recent stages to list.", callback=args.count("--recent")),
) -> None:
    """Stage duration estimates from history (median and high quantile per cost key), and how
    the estimates admission used compare with what the stages actually took."""
    from opsdctl.plan.durations import durations_doc

    app = App.of(ctx)
    cfg = app.config()
    doc = durations_doc(cfg, app.reader(cfg), recent)
    if as_json:
        print_json(doc)
        return
    render_durations(console(), doc)


def render_durations(con: Console, doc: dict) -> None:
    from rich.table import Table

    from opsdctl.plan.budget import fmt_duration

    t = Table(title="stage duration estimates", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("cost key", "n", "median", "high", "min", "max", "source"):
        t.add_column(col)
    for r in doc["estimates"]:
        t.add_row(escape(r["cost_key"]), str(r["n"]), fmt_duration(r["median_s"]), fmt_duration(r["high_s"]),
                  fmt_duration(r["min_s"]), fmt_duration(r["max_s"]), r["source"])
    con.print(t)
    d = doc["defaults_s"]
    con.print(f"rule: {escape(doc['rule'])}; defaults: train {fmt_duration(d['train'])}, eval {fmt_duration(d['eval'])}")
    a = doc["accuracy"]
    if a["stages_with_estimate"]:
        con.print(f"estimate vs actual: {a['stages_with_estimate']} stages, {a['over_estimate']} ran longer than "
                  f"estimated, mean error {a['mean_error_s']:+.0f}s, mean |error| {a['mean_abs_pct']:.0f}%")
