"""Tell a failing machine from a failing chain.

A chain whose command exits 1 failed; a worker that cannot write its store or its runs dir
(disk full, read-only file system, no permission) would fail every chain it touches next.
`environment_problem(exc)` names the second kind in a few words (None for anything else), so
the worker can stop the stage, re-queue its chain and exit with one line.
"""

from __future__ import annotations

import errno
from typing import Optional

ERRNO_WORDS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large",
}
# What SQLite says about the same conditions (through sqlite3 / SQLAlchemy).
SQLITE_WORDS = (
    "database or disk is full",
    "attempt to write a readonly database",
    "disk i/o error",
    "unable to open database file",
)


def environment_problem(exc: BaseException) -> Optional[str]:
    """A few words on why the machine refused, or None when `exc` is not that kind of error."""
    seen = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in ERRNO_WORDS:
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            return ERRNO_WORDS[e.errno] + where
        text = " ".join(str(e).split()).lower()
        for words in SQLITE_WORDS:
            if words in text and type(e).__name__ in ("OperationalError", "DatabaseError"):
                return f"the store: {words}"
        todo += [getattr(e, "orig", None), e.__cause__, e.__context__]
    return None
