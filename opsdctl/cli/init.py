"""`opsdctl init`: a commented starter opsdctl.toml and a copy of the shipped recipes."""

from __future__ import annotations

import shutil
from pathlib import Path

from opsdctl.config import CONFIG_NAME, starter_config
from opsdctl.errors import UserError
from opsdctl.fsutil import atomic_write_text
from opsdctl.recipes.load import shipped_recipes_dir


def init_workspace(directory: Path, profile: str, force: bool = False, copy_recipes: bool = True) -> list[str]:
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
