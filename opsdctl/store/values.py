"""Plain helpers over store values that light readers need too (no SQLAlchemy here): UTC times,
variant labels, compact per-problem counts. opsdctl.store.models re-exports them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional


def utcnow() -> datetime:
    """Now, as an aware UTC datetime: every datetime in the store is UTC."""
    return datetime.now(timezone.utc)


def as_utc(t: datetime) -> datetime:
    """A datetime read back from the store as aware UTC: SQLite keeps naive UTC, PostgreSQL an
    aware timestamptz."""
    return t.replace(tzinfo=timezone.utc) if t.utcoffset() is None else t.astimezone(timezone.utc)


def iso(t: Optional[datetime]) -> Optional[str]:
    if t is None:
        return None
    return t.astimezone(timezone.utc).isoformat(timespec="seconds")


def seconds_since(t: Optional[datetime]) -> Optional[float]:
    if t is None:
        return None
    return max(0.0, (utcnow() - t).total_seconds())


def variant_label(name: str, version: int) -> str:
    return name if version == 1 else f"{name}@v{version}"


def compact_counts(problems: Optional[list]) -> tuple[Optional[str], Optional[str]]:
    """(counts, problem_set) of a Score's per-problem list: "c1,c2,...", and the first 16 hex
    digits of sha256 over the ids (positions stand in for missing ids); (None, None) without it."""
    import hashlib

    if not problems:
        return None, None
    try:
        counts = ",".join(str(int(p["correct"])) for p in problems)
    except (KeyError, TypeError, ValueError):
        return None, None
    ids = "\n".join(str(p.get("id", i)) for i, p in enumerate(problems))
    return counts, hashlib.sha256(ids.encode()).hexdigest()[:16]
