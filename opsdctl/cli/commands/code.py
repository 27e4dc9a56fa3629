"""`opsdctl code`: write out the code a chain's checkpoint was trained with."""

from __future__ import annotations

from pathlib import Path

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, print_json


def command(
    ctx: typer.Context,
    chain: int = typer.Argument(..., metavar="CHAIN", callback=args.chain_ids),
    to: Path = typer.Option(..., "--to", metavar="DIR", help="A new or empty directory to write the code into."),
    as_json: bool = typer.Option(False, "--json", help='Print {"chain_id", "trained_by", "kind", "tree", "commit", "files", "dest"}.'),
) -> None:
    """Write out the code a chain's checkpoint was trained with (its code snapshot, git or copy), so
    a winner whose method lives in code can be restored into the workspace before submitting."""
    from opsdctl.identity.code_export import write_code

    app = App.of(ctx)
    cfg = app.config()
    done = write_code(app.store(cfg), cfg.runs_dir, chain, to)
    if as_json:
        print_json(done.to_json())
        return
    via = f" (trained by chain {done.trained_by})" if done.trained_by != done.chain_id else ""
    console().print(f"wrote {done.files} files of chain {done.chain_id}'s code{via}, {done.kind} tree "
                    f"{done.tree[:12]}, to {escape(done.dest)}")
