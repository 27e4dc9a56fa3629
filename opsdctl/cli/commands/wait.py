"""`opsdctl wait`: block until chains end; each one's outcome; the exit code says how they ended."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.cells import state_cell
from opsdctl.cli.console import console, escape, print_json, warn

if TYPE_CHECKING:
    from rich.console import Console


def command(
    ctx: typer.Context,
    chain_ids: Optional[List[int]] = typer.Argument(None, metavar="[CHAIN_ID]...", help="Chains to wait for.", callback=args.chain_ids,
                                                    show_default=False),
    all_chains: bool = typer.Option(False, "--all", "-a", help="Every queued or running chain, until none is "
                                                               "(chains queued meanwhile too)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="MIN", min=0,
                                            help="Give up after this many minutes (exit 124; the chains keep running)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"ok", "timed_out", "waited_seconds", "chains": [...]}.'),
) -> None:
    """Block until chains end; print each one's outcome; exit 1 if any failed (for scripts and agents).

    Exit 0 when every chain succeeded (or was stopped as futile), 1 when any failed, was cancelled,
    skipped or interrupted, 124 on --timeout. A chain interrupted and re-queued (its worker died)
    is followed to its re-run.
    """
    from opsdctl.errors import UserError
    from opsdctl.client.wait import wait_chains

    app = App.of(ctx)
    if bool(chain_ids) == all_chains:
        raise UserError("opsdctl wait: name the chains (opsdctl wait 3 4) or pass --all, not both or neither")
    cfg = app.config()
    reader = app.reader(cfg)
    err = console(stderr=True)
    warned, absent_since = [], []

    def tick(pending, worker):
        import time

        if worker["state"] == "running":
            absent_since.clear()
        elif not absent_since:
            absent_since.append(time.monotonic())
        if absent_since and time.monotonic() - absent_since[0] >= 5 and not warned:  # not a worker starting up
            warned.append(True)
            warn(f"no worker is running on this store ({worker['text']}): start `opsdctl worker`, or these "
                  "chains never end")
        if spinner is not None:
            first = pending[0]
            prog = (first.get("progress") or {}).get("text") or first["state"]
            spinner.update(escape(f"waiting for {len(pending)} chain{'s' if len(pending) != 1 else ''}: chain "
                                   f"{first['final_chain_id']} {first['variant']} {first.get('stage') or ''} {prog}"))

    spinner = err.status("waiting...") if err.is_terminal and not as_json else None
    if spinner is not None:
        spinner.start()
    try:
        result = wait_chains(reader, None if all_chains else chain_ids, None if timeout is None else timeout * 60, on_tick=tick)
    finally:
        if spinner is not None:
            spinner.stop()
    if as_json:
        print_json(result.to_json())
    else:
        render_wait(console(), result.to_json())
    raise typer.Exit(result.exit_code)


def render_wait(con: Console, doc: dict) -> None:
    """`opsdctl wait`: one line per chain with its outcome, then the verdict."""
    from opsdctl.plan.budget import fmt_duration

    for c in doc["chains"]:
        via = f" (re-run as chain {c['final_chain_id']})" if c["final_chain_id"] != c["chain_id"] else ""
        score = ""
        if c.get("score") is not None:
            score = f", avg@{c['k']} = {c['score']:.2f}" + (" (partial)" if c.get("partial") else "")
        reason = f": {escape(c['reason'])}" if c.get("reason") and c["state"] != "succeeded" else ""
        con.print(f"chain {c['chain_id']}{via} {escape(c['variant'])} seed {c['seed']}: {state_cell(c['state'])}"
                  f"{score}{reason}")
    if doc["timed_out"]:
        left = [c for c in doc["chains"] if c["state"] in ("queued", "running")]
        con.print(f"[yellow]timed out after {fmt_duration(doc['waited_seconds'])}[/yellow]: {len(left)} chain(s) "
                  "still queued or running")
    elif not doc["chains"]:
        con.print("[dim]nothing queued or running[/dim]")
    elif doc["ok"]:
        con.print(f"[green]all {len(doc['chains'])} ended well[/green] (waited {fmt_duration(doc['waited_seconds'])})")
    else:
        bad = [c for c in doc["chains"] if c["state"] not in ("succeeded", "stopped-futile")]
        con.print(f"[red]{len(bad)} of {len(doc['chains'])} did not succeed[/red]")
