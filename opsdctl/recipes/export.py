"""`opsdctl export-recipe`: a variant as the official `recipe.env` (+ our method defaults).

recipe.env carries only the whitelisted hyper-parameters, every one written out, in the
whitelist's order, `true`/`false` for flags, under a header naming the variant and its hash.
Method knobs cannot travel in recipe.env (the official re-training ignores unknown keys): they
are listed in a warning, and `--method-defaults PATH` writes them as a `[method]` TOML that our
trainer reads as its defaults (`python -m trainer --recipe-env X --method-defaults Y`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from opsdctl.errors import UserError
from opsdctl.recipes import knobs
from opsdctl.store.engine import Store, chains_of_variant, find_variant
from opsdctl.store.models import Variant
from opsdctl.store.states import State


@dataclass(frozen=True)
class Export:
    label: str
    hash: str
    recipe_env: str
    method_defaults: str
    off_default_method: dict  # method knobs that differ from the code's released defaults
    succeeded: int

    def warning(self) -> str | None:
        if not self.off_default_method:
            return None
        knob_list = ", ".join(f"{k} = {_toml_value(v)}" for k, v in self.off_default_method.items())
        return (
            f"{self.label}: method knobs cannot travel in recipe.env (the official re-training ignores them): "
            f"{knob_list}; they count only as the code's defaults: write them with --method-defaults PATH"
        )


def export_recipe(store: Store, ref: str, force: bool = False) -> Export:
    with store.read() as s:
        variant: Variant = find_variant(s, ref)
        succeeded = len(chains_of_variant(s, variant.id, State.SUCCEEDED))
    if succeeded == 0 and not force:
        raise UserError(
            f"variant {variant.label} has no succeeded chain; run it first (opsdctl queue {variant.name}), "
            "or pass --force to export it untested"
        )
    header = [
        f"opsdctl export-recipe: variant {variant.name} version {variant.version} ({variant.label})",
        f"sha256 {variant.hash}",
        f"succeeded chains: {succeeded}" + (" (exported with --force)" if succeeded == 0 else ""),
    ]
    if variant.description:
        header.append(" ".join(variant.description.split()))  # one comment line, whatever it held
    text = knobs.format_recipe_env(variant.hparams, header)
    defaults = knobs.default_method()
    off = {k: v for k, v in variant.method.items() if defaults.get(k, object()) != v}
    return Export(variant.label, variant.hash, text, method_defaults_toml(variant), off, succeeded)


def method_defaults_toml(variant: Variant) -> str:
    lines = [
        f"# opsdctl method defaults: variant {variant.label}, sha256 {variant.hash}",
        "# Code-level knobs; our trainer reads this file as its defaults (--method-defaults).",
        "[method]",
    ]
    for key, value in variant.method.items():
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string
