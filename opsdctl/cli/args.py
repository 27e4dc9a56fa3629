"""Range checks for integer command-line values, as Typer callbacks raising one UserError line.

Python integers have no size, SQLite's have 64 bits and seeds 32 (numpy's and most trainers'
limit): unchecked, `--seed 10**30` or `cancel 99999999999999999999` would end in an OverflowError
traceback from the driver. Each check names the option and its range.
"""

from __future__ import annotations

from typing import Callable, Optional

from opsdctl.errors import UserError

SEED_MAX = 2**32 - 1
PRIORITY_LIMIT = 2**31
CHAIN_ID_MAX = 2**63 - 1
COUNT_MAX = 10**6


def _shown(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def _check(value: Optional[int], option: str, lo: int, hi: int, words: str = "") -> Optional[int]:
    if value is not None and not lo <= value <= hi:
        raise UserError(f"{option} {_shown(value)}: must be an integer from {lo} to {hi}{words}")
    return value


def seed(value: Optional[int]) -> Optional[int]:
    return _check(value, "--seed", 0, SEED_MAX, " (what trainers accept as a seed)")


def priority(value: Optional[int]) -> Optional[int]:
    return _check(value, "--priority", -PRIORITY_LIMIT, PRIORITY_LIMIT - 1)


def chain_ids(value):
    """A CHAIN_ID argument, or a list of them."""
    for v in value if isinstance(value, (list, tuple)) else [value]:
        _check(v, "CHAIN_ID", 1, CHAIN_ID_MAX)
    return value


def count(option: str, lo: int = 0, hi: int = COUNT_MAX) -> Callable[[Optional[int]], Optional[int]]:
    return lambda value: _check(value, option, lo, hi)
