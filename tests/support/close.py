"""Compare JSON-like documents the way a reader compares printed reports: every key, key order,
string, integer, boolean and None exactly; floats within a stated tolerance.

A fresh install takes the newest numpy/scipy the project's ranges allow, and a new release (or
another CPU's vector unit) may move a float's last digit. A report printed to 2-4 decimals does
not change with the 15th significant digit, so golden documents hold floats to REL, not to the bit.
"""

from __future__ import annotations

import math
from typing import Any

REL = 1e-9  # relative: far below any printed digit, far above a library's last-bit drift
ABS = 1e-12  # absolute, for values that should be 0 and come out as 1e-17


def floats_close(got: float, want: float, rel: float = REL, abs_: float = ABS) -> bool:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= max(rel * max(abs(got), abs(want)), abs_)


def differences(got: Any, want: Any, rel: float = REL, abs_: float = ABS, path: str = "$") -> list[str]:
    """Where `got` and `want` differ, as 'path: got != want' lines ([] when they match)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return [] if type(got) is type(want) and got == want else [f"{path}: {got!r} != {want!r}"]
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(got, (int, float)) and isinstance(want, (int, float)):
            return [] if floats_close(float(got), float(want), rel, abs_) else [f"{path}: {got!r} != {want!r}"]
        return [f"{path}: {got!r} != {want!r}"]
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: {type(got).__name__} != dict"]
        if list(got) != list(want):
            return [f"{path}: keys {list(got)} != {list(want)}"]
        return [d for k in want for d in differences(got[k], want[k], rel, abs_, f"{path}.{k}")]
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return [f"{path}: {got!r} != {want!r}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, rel, abs_, f"{path}[{i}]")]
    return [] if type(got) is type(want) and got == want else [f"{path}: {got!r} != {want!r}"]


def assert_same_doc(got: Any, want: Any, rel: float = REL, abs_: float = ABS) -> None:
    diffs = differences(got, want, rel, abs_)
    assert not diffs, f"{len(diffs)} difference(s), first: " + "; ".join(diffs[:5])


def perturb_floats(doc: Any, rel: float) -> Any:
    """`doc` with every float moved by the relative amount `rel` (0.0 stays 0.0)."""
    if isinstance(doc, bool) or doc is None or isinstance(doc, (int, str)):
        return doc
    if isinstance(doc, float):
        return doc * (1.0 + rel)
    if isinstance(doc, dict):
        return {k: perturb_floats(v, rel) for k, v in doc.items()}
    return [perturb_floats(v, rel) for v in doc]
