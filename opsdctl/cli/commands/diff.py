"""`opsdctl diff`: what differs between two chains, and whether compare counts them as one candidate."""

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
    chain_a: int = typer.Argument(..., metavar="CHAIN_A", callback=args.chain_ids),
    chain_b: int = typer.Argument(..., metavar="CHAIN_B", callback=args.chain_ids),
    patch: bool = typer.Option(False, "--patch", help="Also print the full code diff (git snapshots)."),
    as_json: bool = typer.Option(False, "--json", help="Print the differences as JSON."),
) -> None:
    """What differs between two chains: knobs, seed and eval settings, the code each checkpoint was
    trained with (diff stat of the two snapshots) and the stage commands; and whether compare
    counts them as one candidate."""
    from opsdctl.client.chain_diff import chain_diff

    app = App.of(ctx)
    cfg = app.config()
    doc = chain_diff(app.reader(cfg), chain_a, chain_b, patch=patch)
    if as_json:
        print_json(doc)
        return
    render_diff(console(), doc)


def render_diff(con: Console, doc: dict) -> None:
    """`opsdctl diff`: the same data as `--json`, one section per kind of difference."""
    from rich.table import Table

    from opsdctl.recipes.knobs import format_value
    from opsdctl.client.chain_diff import identity_words

    a, b = doc["a"], doc["b"]
    con.print(f"[bold]chain {a['chain_id']}[/bold] {escape(a['variant'])} seed {a['seed']} ({a['state']})  vs  "
              f"[bold]chain {b['chain_id']}[/bold] {escape(b['variant'])} seed {b['seed']} ({b['state']})")
    con.print(escape(identity_words(doc)))
    if doc["knobs"]:
        t = Table(title="knobs", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("knob", f"chain {a['chain_id']}", f"chain {b['chain_id']}"):
            t.add_column(col)
        for k in doc["knobs"]:
            fmt = lambda v: "-" if v is None else format_value(v)  # noqa: E731
            t.add_row(f"{k['knob']} [dim]({k['section']})[/dim]", escape(fmt(k["a"])), escape(fmt(k["b"])))
        con.print(t)
    elif doc.get("knobs_note"):
        con.print(f"knobs: {escape(doc['knobs_note'])}")
    else:
        con.print("knobs: the same")
    def setting(what, v) -> str:
        if what == "eval":
            return "full" if not v else f"partial {v['num_problems']}x{v['k']}"
        return "-" if v is None else str(v)

    for d in doc["settings"]:
        con.print(f"{d['what']}: {escape(setting(d['what'], d['a']))} vs {escape(setting(d['what'], d['b']))}")
    code = doc["code"]
    if code["same"]:
        con.print(f"code: the same (@{code['a']['short']})")
    else:
        ca, cb = code["a"] or {}, code["b"] or {}
        con.print(f"code: @{ca.get('short', '-')} vs @{cb.get('short', '-')}"
                  + (f": {escape(code['diffstat'])}" if code["diffstat"] else ""))
        for f in code["files"]:
            con.print(f"  {escape(f)}")
        if code["note"]:
            con.print(f"[yellow]{escape(code['note'])}[/yellow]")
    for c in doc["commands"]:
        con.print(f"{c['stage']} command:\n  - {escape(c['a'])}\n  + {escape(c['b'])}")
    if not doc["commands"]:
        con.print("stage commands: the same")
    if code.get("patch"):
        con.print(code["patch"], markup=False, highlight=False, soft_wrap=True)
