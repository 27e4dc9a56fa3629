"""`opsdctl export-recipe`: a variant (or the forecast's leader) as the official recipe.env, and its method defaults."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, warn


def command(
    ctx: typer.Context,
    variant: Optional[str] = typer.Argument(None, metavar="[VARIANT]", help="Variant name (latest version) or NAME@vN."),
    leader: bool = typer.Option(False, "--leader", help="Export the bet instead of a named variant: the candidate with the "
                                                        "highest shrunk effect that is above the baseline with P >= 0.6, "
                                                        "else the baseline's empty recipe; the header gives the forecast."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="PATH", help="Write recipe.env here [default: stdout]."),
    method_defaults: Optional[Path] = typer.Option(None, "--method-defaults", metavar="PATH", help="Also write the method knobs as a [method] TOML our trainer reads."),
    force: bool = typer.Option(False, "--force", help="Export even without a succeeded chain."),
    all_keys: bool = typer.Option(False, "--all-keys", help="Write every whitelisted key, not only those that differ from the release."),
) -> None:
    """Write a variant as the official recipe.env: the keys that differ from the released recipe (or --all-keys), stable order, a header with its hash."""
    from opsdctl.errors import UserError
    from opsdctl.fsutil import atomic_write_text
    from opsdctl.recipes.export import export_recipe

    app = App.of(ctx)
    if leader == (variant is not None):
        raise UserError("export-recipe: give a VARIANT or --leader (not both, not neither); "
                        "--leader exports the bet (docs/decision.md: what gets submitted)")
    if leader and all_keys:
        raise UserError("export-recipe --leader --all-keys: --all-keys needs a named VARIANT")
    cfg = app.config()
    _refuse_directories(("-o", output), ("--method-defaults", method_defaults))
    store = app.store(cfg)
    if leader:
        text, label, variant = _leader_text(cfg, store)
        if variant is None and method_defaults is not None:
            raise UserError("export-recipe --leader --method-defaults: the leader is the baseline's empty recipe, "
                            "which has no method knobs to write; leave --method-defaults out")
        if output is None:
            sys.stdout.write(text)
        else:
            atomic_write_text(output, text)
            console(stderr=True).print(f"wrote {escape(str(output))} ({escape(label)})")
        if method_defaults is None:
            return
    trained = None if leader else _trained_code(cfg, store, variant)
    exp = export_recipe(store, variant, force=force or leader, all_keys=all_keys, trained=trained)
    warning = exp.warning()
    if warning and method_defaults is None:
        warn(warning)
    if method_defaults is not None:
        atomic_write_text(method_defaults, exp.method_defaults)
        console(stderr=True).print(f"wrote method defaults to {escape(str(method_defaults))}")
    if leader:
        return
    if output is None:
        sys.stdout.write(exp.recipe_env)
    else:
        atomic_write_text(output, exp.recipe_env)
        console(stderr=True).print(f"wrote {escape(str(output))} ({exp.label}, sha256 {exp.hash[:12]})")


def _leader_text(cfg, store) -> tuple[str, str, Optional[str]]:
    """(recipe.env text with the forecast header, the leader's label, its variant or None) of
    `export-recipe --leader`: the same rule and header as the worker's auto-export."""
    import datetime as dt

    from opsdctl.daemon.auto_export import render_file
    from opsdctl.plan.store_report import store_leader, store_report
    from opsdctl.store.open_read import open_reader

    reader = open_reader(store)
    report = store_report(cfg, reader)
    lead = store_leader(reader, report)
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    text = render_file(store, report, lead, when, "the leader by the forecast", source="opsdctl export-recipe --leader")
    return text, lead.name, lead.variant


def _trained_code(cfg, store, ref: str):
    """The code the named variant's latest scored runs were trained with, beside the baseline's, as
    compare reports them (None when it has no scored run, or is not a recipe)."""
    from opsdctl.daemon.auto_export import trained_code
    from opsdctl.errors import UserError
    from opsdctl.plan.store_report import store_report
    from opsdctl.store.open_read import open_reader

    reader = open_reader(store)
    try:
        label = reader.find_variant(ref).label
    except UserError:
        return None  # export_recipe says what is wrong with the name
    report = store_report(cfg, reader)
    mine = [e for e in report.full + report.partials if label in e.variants and e.chain_ids]
    if not mine:
        return None
    return trained_code(max(mine, key=lambda e: max(e.chain_ids)), report.baseline)


def _refuse_directories(*options) -> None:
    from opsdctl.errors import UserError

    for flag, path in options:
        if path is not None and path.is_dir():
            raise UserError(f"{flag} {path}: is a directory; name the file to write (a path inside it)")
