"""`name` or `name@vN`: which version of a variant a reference means, and the one-line refusal
when none. Shared by the ORM (opsdctl.store.engine.find_variant) and the light reader."""

from __future__ import annotations

from typing import Callable, Sequence

from opsdctl.errors import UserError


def pick_variant(ref: str, versions_named: Callable[[str], Sequence], all_variants: Callable[[], Sequence]):
    """`name` (its latest version) or `name@vN` / `name@N`, from rows with name, version and id."""
    name, _, ver = ref.partition("@")
    versions = versions_named(name)
    if not versions:
        known = sorted({v.name for v in all_variants()})
        hint = f"; known: {', '.join(known)}" if known else "; queue a recipe first"
        raise UserError(f"variant {name!r}: not in the store{hint}")
    if not ver:
        return versions[-1]
    try:
        number = int(ver.lstrip("vV"))
    except ValueError:
        raise UserError(f"variant {ref!r}: write NAME or NAME@vN (e.g. {name}@v2)") from None
    for v in versions:
        if v.version == number:
            return v
    raise UserError(
        f"variant {ref!r}: no version {number}; versions: {', '.join(str(v.version) for v in versions)}"
    )
