"""`opsdctl export-recipe`: a variant as the official `recipe.env` (+ our method defaults).

recipe.env carries only whitelisted hyper-parameters, in the whitelist's order, `true`/`false`
for flags, under a comment header naming the variant and its hash. By default it holds only the
keys whose value differs from the released recipe (the official re-training: an absent key is the release, an
empty recipe.env is the baseline), and the header lists the keys left out for equalling it;
`all_keys` writes every whitelisted key. Method knobs cannot travel in recipe.env (the official
re-training ignores unknown keys): they are listed in a warning, and `--method-defaults PATH`
writes them as a `[method]` TOML that our trainer reads as its defaults
(`python -m trainer --recipe-env X --method-defaults Y`).

A candidate's method may also live in its code (an edited trainer or collator): then recipe.env
trains it only together with that code snapshot, and the header says so once, with the command
that restores the code (`opsdctl code CHAIN --to DIR`), in place of "trains the baseline" when no
key differs. The caller says which code it was (`TrainedCode`, from the compare report).
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Optional

from opsdctl.errors import UserError
from opsdctl.recipes import knobs
from opsdctl.store.engine import Store
from opsdctl.store.open_read import open_reader
from opsdctl.store.states import State


@dataclass(frozen=True)
class Export:
    label: str
    hash: str
    recipe_env: str
    method_defaults: str
    off_default_method: dict  # method knobs that differ from the code's released defaults
    succeeded: int
    changed: dict = field(default_factory=dict)  # hyper-parameters that differ from the release
    left_out: list = field(default_factory=list)  # keys not written because they equal the release

    def warning(self) -> str | None:
        if not self.off_default_method:
            return None
        knob_list = ", ".join(f"{k} = {_toml_value(v)}" for k, v in self.off_default_method.items())
        return (
            f"{self.label}: method knobs cannot travel in recipe.env (the official re-training ignores them): "
            f"{knob_list}; they count only as the code's defaults: write them with --method-defaults PATH"
        )


@dataclass(frozen=True)
class TrainedCode:
    """The code tree a candidate was trained with, beside the baseline's (short ids as compare
    prints them, "live" for the live code dir, None when unknown), and the chain whose snapshot
    `opsdctl code` restores."""

    code: Optional[str]
    chain: Optional[int]
    baseline_code: Optional[str]

    @property
    def own(self) -> bool:
        """Its code differs from the baseline's: recipe.env alone does not reproduce it."""
        return bool(self.code) and self.code != "live" and self.code != self.baseline_code


def code_lines(trained: Optional[TrainedCode]) -> list[str]:
    """The header's word on the code, once: where the method lives and, when in its own code tree,
    that recipe.env trains the candidate only with that snapshot and how to restore it."""
    if trained is None or not trained.code:
        return []
    if trained.code == "live":
        return ["code: the live code dir (snapshot_code = false); recipe.env carries only hyper-parameters"]
    if not trained.own:
        return [f"code: tree @{trained.code}, the baseline's own: recipe.env is the whole change"]
    was = f" (the baseline ran on @{trained.baseline_code})" if trained.baseline_code else ""
    restore = (f"`opsdctl code {trained.chain} --to DIR` restores it" if trained.chain is not None
               else "`opsdctl code CHAIN --to DIR` restores it from one of its chains")
    return [f"code: the method lives in code: this recipe.env trains the candidate only with its code snapshot, "
            f"tree @{trained.code}{was}; submit that code with it: {restore}"]


def changed_hparams(hparams: dict) -> dict:
    """The keys whose value differs from the released recipe (knobs.HPARAMS defaults), in order."""
    released = knobs.default_hparams()
    return {k: hparams[k] for k in knobs.HPARAMS if k in hparams and hparams[k] != released[k]}


def left_out_lines(keys: list[str], width: int = 96) -> list[str]:
    """Header lines naming the keys left out because they equal the release."""
    if not keys:
        return []
    text = f"left out, equal to the released recipe ({len(keys)}): " + ", ".join(keys)
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)


def export_recipe(store: Store, ref: str, force: bool = False, all_keys: bool = False,
                  trained: Optional[TrainedCode] = None) -> Export:
    with open_reader(store).snapshot() as reader:  # on the Store's engine: nothing to close
        variant = reader.find_variant(ref)
        if variant.kind != "recipe":
            what = "the base model" if variant.kind == "base" else "a checkpoint trained outside opsdctl"
            raise UserError(f"variant {variant.label} is {what} (evaluated with --eval-only), not a recipe; "
                            "there are no knobs to export")
        succeeded = sum(1 for c in reader.chains_of_variant(variant.id) if c.state == State.SUCCEEDED.value)
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
    changed = changed_hparams(variant.hparams)
    body = {k: variant.hparams[k] for k in knobs.HPARAMS if k in variant.hparams} if all_keys else changed
    left_out = [k for k in knobs.HPARAMS if k in variant.hparams and k not in body]
    if all_keys:
        header.append(f"every whitelisted key written (--all-keys); {len(changed)} differ from the released recipe")
    elif not changed and trained is not None and trained.own:
        header.append("no key differs from the released recipe: the candidate differs from the baseline in its code")
    elif not changed:
        header.append("no key differs from the released recipe: this empty recipe.env trains the baseline")
    else:
        n = len(changed)
        header.append(f"only what differs from the released recipe ({n} key{'' if n == 1 else 's'}; "
                      "--all-keys writes every one)")
    header += left_out_lines(left_out)
    header += code_lines(trained)
    text = knobs.format_recipe_env(body, header)
    defaults = knobs.default_method()
    off = {k: v for k, v in variant.method.items() if defaults.get(k, object()) != v}
    return Export(variant.label, variant.hash, text, method_defaults_toml(variant), off, succeeded,
                  changed=changed, left_out=left_out)


def method_defaults_toml(variant) -> str:
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
