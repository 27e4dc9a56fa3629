"""`opsdctl variants`: the recorded variants, the knobs each changes, their runs and scores."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from opsdctl.cli.app import App
from opsdctl.cli.cells import changes_text
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console



def command(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print the variants as JSON.")) -> None:
    """Recorded variants: name, version, hash, knobs that differ from the released recipe, runs."""
    from opsdctl.cli.documents.variant import list_variants

    app = App.of(ctx)
    cfg = app.config()
    rows = list_variants(app.reader(cfg))
    if as_json:
        print_json(rows)
        return
    render_variants(console(), rows)


def render_variants(con: Console, rows: list[dict]) -> None:
    from rich.table import Table

    if not rows:
        con.print("[dim]no variants yet: opsdctl queue RECIPE[/dim]")
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("variant", "hash", "changes", "runs", "scores"):
        t.add_column(col, overflow="fold")
    t.add_column("description", no_wrap=True, overflow="ellipsis", max_width=48)
    for r in rows:
        runs = f"{r['succeeded']}/{r['chains']}" + (f" (+{r['queued']} queued)" if r["queued"] else "")
        scores = " ".join(f"{x:.2f}" for x in r["scores"])
        if r.get("partial_scores"):  # screening runs: marked, never mixed in with the full scores
            scores += (" " if scores else "") + " ".join(
                f"[yellow]{p['score']:.2f} (partial {p['n_problems']}x{p['k']})[/yellow]" for p in r["partial_scores"])
        changes = {"base": "(base model)", "checkpoint": "(outside checkpoint)"}.get(r.get("kind"), changes_text(r["changes"]))
        t.add_row(escape(r["variant"]), r["hash"][:12], escape(changes), runs, scores,
                  escape(r["description"]))
    con.print(t)
