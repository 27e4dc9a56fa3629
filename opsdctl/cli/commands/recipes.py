"""`opsdctl recipes`: the recipe files (local and shipped), validated, with their hashes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from opsdctl.cli.app import App
from opsdctl.cli.cells import changes_text
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console

    from opsdctl.config import Config


def command(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print the recipes as JSON.")) -> None:
    """Recipe files under recipes_dir (and the shipped ones), validated, with their hashes.
    Exits 1 when any of them is invalid (after listing them all), so scripts and CI notice."""
    app = App.of(ctx)
    cfg = app.config()
    rows = list_recipes(cfg)
    if as_json:
        print_json(rows)
    else:
        render_recipes(console(), rows)
    bad = sum(1 for r in rows if r.get("error"))
    if bad:
        if not as_json:
            console(stderr=True).print(f"[red]{bad} of {len(rows)} recipes are invalid[/red] (exit 1)")
        raise typer.Exit(1)


def list_recipes(cfg: Config) -> list[dict]:
    from opsdctl.errors import UserError
    from opsdctl.recipes.knobs import recipe_changes
    from opsdctl.recipes.load import load_recipe, shipped_recipes_dir

    dirs = [cfg.recipes_dir]
    shipped = shipped_recipes_dir()
    if shipped is not None and shipped.resolve() != cfg.recipes_dir.resolve():
        dirs.append(shipped)
    seen = set()
    rows = []
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            if path.stem in seen:
                continue  # a local recipe shadows a shipped one of the same name
            seen.add(path.stem)
            row = {"file": str(path), "shipped": d != cfg.recipes_dir}
            try:
                r = load_recipe(str(path), cfg.recipes_dir, cfg.extra_method_knobs)
                row.update(name=r.name, hash=r.hash, description=r.description,
                           extends=[p.stem for p in r.lineage[1:]], changes=recipe_changes(r.hparams, r.method), error=None)
            except UserError as exc:
                row.update(name=path.stem, hash=None, description="", extends=[], changes={}, error=str(exc))
            rows.append(row)
    return rows


def render_recipes(con: Console, rows: list[dict]) -> None:
    from rich.table import Table

    if not rows:
        con.print("[dim]no recipes found[/dim]")
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("recipe", "extends", "changes", "hash"):
        t.add_column(col, overflow="fold")
    t.add_column("description", no_wrap=True, overflow="ellipsis", max_width=48)
    for r in rows:
        name = escape(r["name"]) + (" [dim](shipped)[/dim]" if r["shipped"] else "")
        if r["error"]:
            t.add_row(name, "", f"[red]{escape(r['error'])}[/red]", "", "")
            continue
        t.add_row(name, escape(" -> ".join(r["extends"])), escape(changes_text(r["changes"])), r["hash"][:12],
                  escape(r["description"]))
    con.print(t)
