"""Recipes: TOML files with `extends`, validated against the knob whitelist, resolved, hashed.

A recipe's identity is the sha256 of the canonical JSON of its fully resolved {hparams, method}
(every whitelisted key and every method knob, defaults filled in); the name and description
are labels, not content. So two files that resolve to the same knobs are the same recipe.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from opsdctl.errors import UserError
from opsdctl.recipes.toml_file import read_toml_file
from opsdctl.recipes import knobs

TOP_KEYS = ("name", "extends", "description", "hparams", "method")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # \Z: "$" would pass "name\n"
NAME_RULE = "use letters, digits, '.', '_' or '-' (no spaces, '@', '/', quotes or control characters), at most 64"


def valid_name(name: str) -> bool:
    """A variant name: it reaches file names, status, the worker log and stage command lines,
    so it holds no shell metacharacter and no terminal escape."""
    return bool(NAME_RE.match(name))


def control_characters(text: str, allowed: str = "") -> bool:
    """Whether `text` holds a control character (a terminal escape, a carriage return...)."""
    return any(not c.isprintable() and c not in allowed for c in text)


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    hparams: dict[str, Any]  # every whitelisted key, resolved
    method: dict[str, Any]  # every method knob (plus extra knobs set along the chain), resolved
    path: Path
    lineage: tuple[Path, ...]  # this file first, then what it extends, ...

    @property
    def hash(self) -> str:
        return content_hash(self.hparams, self.method)


def content_hash(hparams: dict, method: dict) -> str:
    canonical = json.dumps({"hparams": hparams, "method": method}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def recipe_json(name: str, version: int, description: str, hparams: dict, method: dict) -> dict:
    """The `{recipe_json}` file content of the stage contract."""
    full_h = {k: hparams[k] for k in knobs.HPARAMS if k in hparams}
    return {
        "name": name,
        "version": version,
        "hash": content_hash(hparams, method),
        "description": description,
        "hparams": full_h,
        "method": dict(method),
    }


def shipped_recipes_dir() -> Optional[Path]:
    """Recipes that ship with opsdctl: packaged data, or the repository's recipes/ (editable)."""
    package = Path(__file__).resolve().parents[1]  # opsdctl/
    for candidate in (package / "recipes", package.parent / "recipes"):
        if candidate.is_dir() and any(candidate.glob("*.toml")):
            return candidate
    return None


def find_recipe(ref: str, recipes_dir: Path, relative_to: Optional[Path] = None) -> Path:
    """A path (absolute, or relative to `relative_to`/cwd), or a name under recipes_dir."""
    looks_like_path = "/" in ref or ref.endswith(".toml") or ref.startswith(".")
    if looks_like_path:
        p = Path(ref).expanduser()
        if not p.is_absolute() and relative_to is not None:
            p = relative_to / p
        if not p.is_file():
            raise UserError(f"{ref}: recipe file not found ({p.resolve()})")
        return p.resolve()
    searched = [recipes_dir]
    shipped = shipped_recipes_dir()
    if shipped is not None and shipped.resolve() != Path(recipes_dir).resolve():
        searched.append(shipped)
    for d in searched:
        p = Path(d) / f"{ref}.toml"
        if p.is_file():
            return p.resolve()
    where = " or ".join(str(d) for d in searched)
    available = sorted({p.stem for d in searched if Path(d).is_dir() for p in Path(d).glob("*.toml")})
    hint = f"; available: {', '.join(available)}" if available else ""
    raise UserError(f"recipe {ref!r}: no {ref}.toml in {where}{hint}")


def _read_toml(path: Path) -> dict:
    return read_toml_file(path)


def _check_file(doc: dict, path: Path, extra: Sequence[str]) -> dict:
    where = str(path)
    for key in doc:
        if key not in TOP_KEYS:
            knobs.refuse_budget_knob(key, where)
            if key in knobs.HPARAMS:
                raise UserError(f"{where}: {key}: hyper-parameters go under [hparams]")
            if key in knobs.METHOD_KNOBS or key in extra:
                raise UserError(f"{where}: {key}: method knobs go under [method]")
            raise UserError(f"{where}: {key}: unknown top-level key; allowed: {', '.join(TOP_KEYS)}")
    for key in ("name", "extends", "description"):
        if key in doc and not isinstance(doc[key], str):
            raise UserError(f"{where}: {key} = {doc[key]!r}: must be a quoted string")
    if "name" in doc and not valid_name(doc["name"]):
        raise UserError(f"{where}: name = {doc['name']!r}: {NAME_RULE}")
    if control_characters(doc.get("description", ""), allowed="\n\t"):
        raise UserError(f"{where}: description holds a control character (a terminal escape?); remove it")
    for key in ("hparams", "method"):
        if key in doc and not isinstance(doc[key], dict):
            raise UserError(f"{where}: {key}: must be a table ([{key}])")
    return {
        "hparams": knobs.check_hparams(doc.get("hparams", {}), where),
        "method": knobs.check_method(doc.get("method", {}), where, tuple(extra)),
    }


def load_recipe(ref: str, recipes_dir: Path, extra_method_knobs: Sequence[str] = ()) -> Recipe:
    """Find, validate and resolve a recipe (defaults overlaid along the `extends` chain)."""
    if ref.endswith(".env"):
        raise UserError(f"{ref}: a recipe.env (KEY=VALUE lines), not a TOML recipe; queue it with "
                        f"`opsdctl queue --env {ref} [--name NAME]`")
    path = find_recipe(ref, recipes_dir)
    lineage: list[Path] = []
    layers: list[dict] = []
    docs: list[dict] = []
    current: Optional[Path] = path
    while current is not None:
        if current in lineage:
            cycle = " -> ".join(p.name for p in lineage + [current])
            raise UserError(f"{path}: extends cycle: {cycle}; remove one `extends`")
        lineage.append(current)
        doc = _read_toml(current)
        layers.append(_check_file(doc, current, extra_method_knobs))
        docs.append(doc)
        parent = doc.get("extends")
        if parent is None:
            current = None
        elif not parent.strip():
            raise UserError(f"{current}: extends: must name a recipe or a path")
        else:
            try:
                current = find_recipe(parent, recipes_dir, relative_to=current.parent)
            except UserError as exc:
                raise UserError(f"{current}: extends = {parent!r}: {exc}") from None

    hparams = knobs.default_hparams()
    method = knobs.default_method()
    for layer in reversed(layers):  # base first, this file last
        hparams.update(layer["hparams"])
        method.update(layer["method"])
    knobs.check_invariants(hparams, str(path), method)

    name = docs[0].get("name") or path.stem
    if not valid_name(name):
        raise UserError(f"{path}: the file name {path.stem!r} is not a valid recipe name; set name = \"...\"")
    description = docs[0].get("description", "")  # a parent's rationale is not this recipe's
    return Recipe(
        name=name,
        description=description,
        hparams={k: hparams[k] for k in knobs.HPARAMS},
        method=method,
        path=path,
        lineage=tuple(lineage),
    )


ENV_MAX_BYTES = 1 << 20  # a recipe.env is a few lines


def load_recipe_env(file: str, name: Optional[str] = None) -> Recipe:
    """A recipe.env (the users' native `KEY=VALUE` format, what the official re-training reads) as
    a recipe: its keys over the baseline's defaults, checked by the same whitelist as a TOML
    recipe's [hparams]; method knobs keep their defaults. Named `name`, else after the file."""
    if control_characters(file):
        raise UserError(f"--env {file!r}: the path holds a control character (a terminal escape?); rename the file")
    path = Path(file).expanduser()
    if not path.is_file():
        raise UserError(f"--env {file}: no such file; give a recipe.env of KEY=VALUE lines")
    path = path.resolve()
    if path.stat().st_size > ENV_MAX_BYTES:
        raise UserError(f"--env {file}: {path.stat().st_size} bytes; a recipe.env is a few KEY=VALUE lines")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"--env {file}: not UTF-8 text (byte at offset {exc.start}); save it as UTF-8") from None
    hparams = knobs.default_hparams()
    hparams.update(knobs.parse_recipe_env(text, str(path)))
    method = knobs.default_method()
    knobs.check_invariants(hparams, str(path), method)
    name = path.stem if name is None else name
    if not NAME_RE.match(name):
        raise UserError(f"--env {file}: recipe name {name!r}: {NAME_RULE}; give one with --name NAME")
    return Recipe(name=name, description=f"from {path.name}", hparams={k: hparams[k] for k in knobs.HPARAMS},
                  method=method, path=path, lineage=(path,))
