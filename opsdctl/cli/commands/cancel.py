"""`opsdctl cancel`: a queued chain never runs; a running one is stopped, its own processes only."""

from __future__ import annotations

from typing import List, Optional

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape


def command(
    ctx: typer.Context,
    chain_ids: List[int] = typer.Argument(..., metavar="CHAIN_ID", help="Chains to cancel.", callback=args.chain_ids),
    grace: Optional[float] = typer.Option(None, "--grace", min=0, help="Seconds between TERM and KILL [default: from config]."),
) -> None:
    """Cancel chains: a queued one never runs; a running one gets TERM, then KILL after the grace period.

    Only the stage's own process group (and processes carrying its token) is signalled.
    """
    from opsdctl.client.cancel import cancel_chain
    from opsdctl.daemon.executors import cancel_stopper

    app = App.of(ctx)
    cfg = app.config()
    store = app.store(cfg)
    con = console()
    grace = cfg.kill_grace_seconds if grace is None else grace
    remote_stop = cancel_stopper(cfg, store, grace, chain_ids)  # executor = "ray": through the chain's actor
    failed = None
    with con.status("cancelling...") as spinner:
        for cid in chain_ids:
            try:
                res = cancel_chain(store, cid, grace, on_wait=lambda text: spinner.update(escape(text)),
                                   remote_stop=remote_stop)
            except Exception as exc:
                from opsdctl.errors import UserError

                if not isinstance(exc, UserError) or len(chain_ids) == 1:
                    raise
                failed = exc
                con.print(f"[red]{escape(str(exc))}[/red]")
                continue
            con.print(escape(res.text()))
    if failed is not None:
        raise typer.Exit(2)
