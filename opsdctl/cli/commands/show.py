"""`opsdctl show`: one variant, its recipe and every run (counts, training statistics, GPU use, code)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from opsdctl.cli.app import App
from opsdctl.cli.cells import changes_text, num, state_cell
from opsdctl.cli.console import console, escape, print_json, warn

if TYPE_CHECKING:
    from rich.console import Console


def command(
    ctx: typer.Context,
    variant: str = typer.Argument(..., metavar="VARIANT", help="NAME (latest version) or NAME@vN."),
    as_json: bool = typer.Option(False, "--json", help="Print the variant and its runs as JSON."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="PNG",
                                        help="Also draw its runs' training curves (loss, KL, clipping, learning rate, "
                                             "your [stages.train.metrics]) to this PNG, the baseline's greyed behind."),
) -> None:
    """One variant: its recipe and every run, with per-problem counts and training statistics."""
    from opsdctl.cli.documents.variant import variant_doc

    app = App.of(ctx)
    cfg = app.config()
    reader = app.reader(cfg)
    doc = variant_doc(reader, variant)
    drawn = None
    if plot is not None:
        from opsdctl.errors import UserError
        from opsdctl.stats.train_plot import plot_training

        base = None
        if cfg.baseline_variant and cfg.baseline_variant.split("@")[0] != doc["name"]:
            try:
                base = variant_doc(reader, cfg.baseline_variant)
            except UserError:  # not run yet: curves of the variant alone
                base = None
        drawn = plot_training(doc, plot, base)
        if drawn is None:
            warn(f"{doc['variant']}: no run has a training curve yet; no plot written")
    if as_json:
        print_json(doc)
        return
    render_show(console(), doc)
    if drawn is not None:
        console().print(f"plot: {escape(str(drawn))}")


def render_show(con: Console, doc: dict) -> None:
    from rich.table import Table

    from opsdctl.recipes.knobs import recipe_changes

    con.print(f"[bold]{escape(doc['variant'])}[/bold]  {doc['hash'][:12]}  {escape(doc['description'] or '')}")
    if doc.get("kind", "recipe") == "recipe":
        con.print(f"changes: {escape(changes_text(recipe_changes(doc['hparams'], doc['method'])))}")
    else:  # evaluated with --eval-only: no recipe behind it
        con.print("kind: " + ("the base model (untrained)" if doc["kind"] == "base"
                              else "a checkpoint trained outside opsdctl (knobs unknown)"))
    if not doc["runs"]:
        con.print("[dim]no chains yet[/dim]")
        return
    t = Table(show_edge=False, pad_edge=False)
    extra = sorted({n for r in doc["runs"] for n in ((r["train"] or {}).get("metrics") or {})} - {"kl", "frac_clipped"})
    gpu_stages = [st for st in ("train", "eval") if any(st in (r.get("gpu") or {}) for r in doc["runs"])]
    cols = (["chain", "seed", "state", "avg@k", "k x n", "code", "loss", "KL", "clipped"] + extra
            + [f"{st} GPU peak/util" for st in gpu_stages] + ["recipe", "cmds", "per-problem correct"])
    for col in cols:
        t.add_column(col, overflow="fold")
    for r in doc["runs"]:
        tr = r["train"] or {}
        kn = f"{r['k']} x {r['n_problems']}" if r["k"] else "-"
        if not r["k"] and r.get("eval"):  # not scored yet: what it was asked for
            kn = f"{r['eval']['k']} x {r['eval']['num_problems']}"
        if r["partial"]:
            kn += " [yellow]partial[/yellow]"
        if r.get("eval_only"):
            kn += " [dim]eval only[/dim]"
        counts = " ".join(str(p["correct"]) for p in r["problems"]) if r["problems"] else "-"
        state = state_cell(r["state"]) + (f" [dim]({escape(r['reason'])})[/dim]" if r["reason"] else "")
        t.add_row(str(r["chain_id"]), str(r["seed"]), state, num(r["score"], "{:.2f}"), kn, _code_cell(r.get("code")),
                  num(tr.get("final_loss"), "{:.4g}"), num(tr.get("mean_kl"), "{:.4g}"),
                  num(tr.get("frac_clipped"), "{:.1%}"),
                  *[num(((tr.get("metrics") or {}).get(n) or {}).get("mean"), "{:.4g}") for n in extra],
                  *[_gpu_cell((r.get("gpu") or {}).get(st)) for st in gpu_stages],
                  _recipe_status(r.get("recipe_check")), (r.get("commands_hash") or "-")[:8], counts)
    con.print(t)
    if any(g.get("attribution") == "device" for r in doc["runs"] for g in (r.get("gpu") or {}).values()):
        con.print("[dim]* GPU memory read as the device's used memory minus what it held when the stage started "
                  "(NVML listed none of the stage's own processes)[/dim]")
    hashes = {r.get("commands_hash") for r in doc["runs"]}
    if len(hashes) > 1:
        con.print(f"[yellow]these runs were made with {len(hashes)} different sets of stage commands (cmds)[/yellow]")
    for r in doc["runs"]:
        check = r.get("recipe_check") or {}
        if check.get("status") == "not verified":
            why = "; ".join(check.get("unchecked") or []) or "the train log shows none of the recipe's values"
            con.print(f"[dim]chain {r['chain_id']}: recipe not verified: {escape(why)}[/dim]")
    render_code_snapshots(con, [r.get("code") for r in doc["runs"]] + [r.get("eval_code") for r in doc["runs"]])


def _gpu_cell(g: Optional[dict]) -> str:
    """'9300 MiB 87%' from a stage's NVML figures; '*' marks memory read as the device's (no
    per-process figures from NVML)."""
    if not g or g.get("peak_mib") is None:
        return "-"
    mark = "*" if g.get("attribution") == "device" else ""
    util = "" if g.get("util_pct") is None else f" {g['util_pct']:.0f}%"
    return f"{g['peak_mib']:.0f} MiB{mark}{util}"


def _code_cell(code: Optional[dict]) -> str:
    if not code:
        return "-"
    return "@" + code["short"] + (" [yellow]dirty[/yellow]" if code["dirty"] else "")


def render_code_snapshots(con: Console, codes: list) -> None:
    """One line per distinct code snapshot: tree, commit, HEAD, dirty flag and a short diff stat."""
    seen = {}
    for c in codes:
        if c and c["tree"] not in seen:
            seen[c["tree"]] = c
    for c in seen.values():
        if c["kind"] == "live":
            con.print(f"code @live: the live code dir {escape(c['tree'])} (snapshot_code = false): not recorded")
            continue
        line = f"code @{c['short']}: {c['kind']} {c['tree'][:12]}"
        if c.get("commit"):
            line += f", commit {c['commit'][:12]}"
        if c.get("head"):
            line += f" on HEAD {c['head'][:12]}"
        if c["dirty"]:
            line += f", [yellow]dirty[/yellow]: {escape(c['diffstat'])}" + (f" ({escape(c['files'])})" if c["files"] else "")
        elif c["kind"] == "git":
            line += ", clean"
        con.print(line)


def _recipe_status(check: Optional[dict]) -> str:
    status = (check or {}).get("status")
    return {"verified": "[green]verified[/green]", "mismatch": "[red]not applied[/red]",
            "not verified": "[yellow]not verified[/yellow]"}.get(status, "-")
