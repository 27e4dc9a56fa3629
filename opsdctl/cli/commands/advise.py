"""`opsdctl advise`: the next actions, ranked by the gain each is expected to bring the submission."""

from __future__ import annotations

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, print_json


def command(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print the ranked actions as JSON.")) -> None:
    """The next actions, ranked by how much each is expected to raise the submission's official score
    per GPU minute.

    The submission is the candidate most likely above the baseline (or the baseline); an action's
    gain is its value of information (the knowledge gradient, or a run's chance of carrying a
    leader over the submission threshold, in points), priced at the learned
    durations and checked against the time left. The actions that fit come first, by gain per
    minute (a cheap re-eval can rank above a larger but longer run); `stop` (gain 0) ranks above
    whatever does not fit or is not worth its minutes.
    """
    from opsdctl.cli.documents.compare import compare_report

    app = App.of(ctx)
    cfg = app.config()
    ranked = compare_report(cfg, app.reader(cfg)).advice
    if as_json:
        print_json([a.to_json() for a in ranked])
        return
    con = console()
    if not ranked:
        con.print("No advice yet: no noise estimate (repeat a variant, or give \\[baseline] reference = {mean, sd, n}).")
        return
    con.print("Next actions, by expected official points per GPU minute (those that fit first; `stop` "
              "ranks above what does not fit or is worth nothing):")
    for i, a in enumerate(ranked, start=1):
        con.print(f"{i:>2}. {escape(a.text())}")
