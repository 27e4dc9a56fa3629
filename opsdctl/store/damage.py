"""A store that fails after it was opened: a damaged file, a table gone, a disk that refuses.

`open_store` turns errors at open into one line; this does the same for the ones that surface
later (`database disk image is malformed`, `no such table: score`): the CLI prints one line and
exits 2 instead of a driver traceback, and writes nothing more.
"""

from __future__ import annotations

from typing import Optional


def damaged_store_error(exc: BaseException, store_url: Optional[str]) -> Optional[str]:
    """One line for a database error, or None when `exc` is not one."""
    import sqlite3

    from sqlalchemy.exc import DBAPIError

    from opsdctl.store.engine import db_error_text, redact

    if not isinstance(exc, (DBAPIError, sqlite3.DatabaseError)):
        return None
    text = redact(db_error_text(exc), None)
    where = f"store {store_url}" if store_url else "the store"
    low = text.lower()
    if "malformed" in low or "no such table" in low or "no such column" in low or "not a database" in low:
        hint = "it is damaged or was changed by another program; restore it from a backup, or move it aside to start a new store"
    else:
        hint = "nothing more was written"
    return f"{where}: {text}; {hint}"
