"""`opsdctl export-recipe`: a variant as the official recipe.env (and its method defaults)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, warn


def command(
    ctx: typer.Context,
    variant: str = typer.Argument(..., metavar="VARIANT", help="Variant name (latest version) or NAME@vN."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="PATH", help="Write recipe.env here [default: stdout]."),
    method_defaults: Optional[Path] = typer.Option(None, "--method-defaults", metavar="PATH", help="Also write the method knobs as a [method] TOML our trainer reads."),
    force: bool = typer.Option(False, "--force", help="Export even without a succeeded chain."),
    all_keys: bool = typer.Option(False, "--all-keys", help="Write every whitelisted key, not only those that differ from the release."),
) -> None:
    """Write a variant as the official recipe.env: the keys that differ from the released recipe (or --all-keys), stable order, a header with its hash."""
    from opsdctl.fsutil import atomic_write_text
    from opsdctl.recipes.export import export_recipe

    app = App.of(ctx)
    cfg = app.config()
    _refuse_directories(("-o", output), ("--method-defaults", method_defaults))
    exp = export_recipe(app.store(cfg), variant, force=force, all_keys=all_keys)
    warning = exp.warning()
    if warning and method_defaults is None:
        warn(warning)
    if method_defaults is not None:
        atomic_write_text(method_defaults, exp.method_defaults)
        console(stderr=True).print(f"wrote method defaults to {escape(str(method_defaults))}")
    if output is None:
        sys.stdout.write(exp.recipe_env)
    else:
        atomic_write_text(output, exp.recipe_env)
        console(stderr=True).print(f"wrote {escape(str(output))} ({exp.label}, sha256 {exp.hash[:12]})")


def _refuse_directories(*options) -> None:
    from opsdctl.errors import UserError

    for flag, path in options:
        if path is not None and path.is_dir():
            raise UserError(f"{flag} {path}: is a directory; name the file to write (a path inside it)")
