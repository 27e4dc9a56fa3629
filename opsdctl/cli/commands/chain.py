"""`opsdctl chain`: one chain, its stages, run, checks and the tail of its log: the chain document
(opsdctl.cli.documents.chain, the dashboard's chain page too) drawn with rich."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.cells import num, state_cell
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console



def command(
    ctx: typer.Context,
    chain_id: int = typer.Argument(..., metavar="CHAIN", callback=args.chain_ids),
    lines: int = typer.Option(40, "--lines", "-n", min=0, help="How many lines of its current stage's log.",
                              callback=args.count("--lines")),
    as_json: bool = typer.Option(False, "--json", help="Print the chain, its run and its log's tail as JSON."),
) -> None:
    """One chain: its stages and progress, score and per-problem counts, training statistics,
    recipe check, code, and the tail of its current stage's log."""
    from opsdctl.cli.documents.chain import chain_doc

    app = App.of(ctx)
    cfg = app.config()
    doc = chain_doc(app.reader(cfg), chain_id, lines)
    if as_json:
        print_json(doc)
        return
    render_chain(console(), doc)


def render_chain(con: Console, doc: dict) -> None:
    """`opsdctl chain ID`: the stages, the score, the run's training and checks, the log's tail."""
    from rich.table import Table

    run = doc["run"]
    con.print(f"[bold]chain {doc['chain_id']}[/bold] {escape(doc['variant'])} seed {doc['seed']}: "
              f"{state_cell(doc['state'])}" + (f" [dim]({escape(doc['reason'])})[/dim]" if doc.get("reason") else ""))
    t = Table(show_edge=False, pad_edge=False)
    for col in ("stage", "state", "progress", "seconds", "GPUs", "peak MiB", "exit"):
        t.add_column(col)
    for st in doc.get("stages") or []:
        t.add_row(st["name"], state_cell(st["state"]), escape((st.get("progress") or {}).get("text") or "-"),
                  num(st["seconds"], "{:.1f}"), escape(st.get("gpus") or "-"), num(st.get("gpu_peak_mib"), "{:.0f}"),
                  "-" if st.get("exit_code") is None else str(st["exit_code"]))
    if doc.get("stages"):
        con.print(t)
    if doc.get("score") is not None:
        counts = " ".join(str(p["correct"]) for p in run["problems"] or [])
        con.print(f"score {doc['score']:.2f} (avg@{doc['k']} on {doc['n_problems']} problems)  per problem: {counts}")
    tr = run.get("train") or {}
    if tr:
        con.print(f"train: loss {num(tr.get('final_loss'), '{:.4g}')}, KL {num(tr.get('mean_kl'), '{:.4g}')}, "
                  f"clipped {num(tr.get('frac_clipped'), '{:.3g}')}, {tr.get('steps') or '-'} steps")
    if run.get("recipe_check"):
        con.print(f"recipe check: {escape(str(run['recipe_check'].get('status')))}")
    code = run.get("code") or {}
    if code:
        con.print(f"code: {escape(code.get('kind') or '')} @{escape(code.get('short') or '')}")
    tail = doc.get("log_tail")
    if tail and tail["lines"]:
        con.print(f"[dim]-- {escape(tail['path'])} (last {len(tail['lines'])} lines) --[/dim]")
        con.print(escape("\n".join(tail["lines"])), highlight=False)
