"""`opsdctl init`: a commented starter opsdctl.toml and a copy of the shipped recipes."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from opsdctl.cli.console import console, escape


def command(
    ctx: typer.Context,
    profile: str = typer.Option("tiny", "--profile", "-p", help="Fixed setting to start from: tiny (CPU, offline) or qwen3-1.7b."),
    directory: Path = typer.Option(Path("."), "--dir", "-d", help="Where to write opsdctl.toml.", file_okay=False),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing opsdctl.toml."),
    no_recipes: bool = typer.Option(False, "--no-recipes", help="Do not copy the shipped recipes into recipes/."),
) -> None:
    """Write a commented starter opsdctl.toml (and copy the shipped recipes into recipes/)."""
    written = init_workspace(directory, profile, force=force, copy_recipes=not no_recipes)
    con = console()
    for line in written:
        con.print(f"wrote {escape(line)}")
    con.print("next: [bold]opsdctl queue baseline[/bold], then [bold]opsdctl worker --drain[/bold]")


def init_workspace(directory: Path, profile: str, force: bool = False, copy_recipes: bool = True) -> list[str]:
    from opsdctl.config import CONFIG_NAME, starter_config
    from opsdctl.errors import UserError
    from opsdctl.fsutil import atomic_write_text
    from opsdctl.recipes.load import shipped_recipes_dir

    directory = Path(directory).resolve()
    target = directory / CONFIG_NAME
    text = starter_config(profile)  # validates the profile name first
    if target.exists() and not force:
        raise UserError(f"{target}: already exists; pass --force to overwrite it")
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, text)
    written = [str(target)]
    shipped = shipped_recipes_dir()
    if copy_recipes and shipped is not None:
        dest = directory / "recipes"
        if dest.resolve() != shipped.resolve():
            dest.mkdir(exist_ok=True)
            copied = []
            for src in sorted(shipped.glob("*.toml")):
                if not (dest / src.name).exists():
                    shutil.copyfile(src, dest / src.name)
                    copied.append(src.name)
            if copied:
                written.append(f"{dest}/ ({', '.join(copied)})")
    return written
