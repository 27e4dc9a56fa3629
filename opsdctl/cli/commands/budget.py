"""`opsdctl budget`: the time left, and restarting an hours budget's clock."""

from __future__ import annotations

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, print_json


def command(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print the budget as JSON."),
    restart_clock: bool = typer.Option(False, "--restart-clock", help="hours budgets: start counting again now."),
) -> None:
    """Time left, from [budget] remaining_file, deadline or hours, minus the margin."""
    import time

    from opsdctl.plan.budget import CLOCK_KEY, budget_now, clock_start
    from opsdctl.store.engine import set_meta

    app = App.of(ctx)
    cfg = app.config()
    store = app.store(cfg)
    if restart_clock:
        with store.write() as s:
            set_meta(s, CLOCK_KEY, repr(time.time()) if cfg.budget.kind == "hours" else None)
    view = budget_now(cfg.budget, clock_start(app.reader(cfg)))
    if as_json:
        print_json({**view.to_json(), "text": view.text()})
        return
    console().print(f"budget: {escape(view.text())}")
