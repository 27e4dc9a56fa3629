"""The file of a plain SQLite URL, read without SQLAlchemy (whose import costs 0.25 s).

Only the common, unambiguous form is recognised: `sqlite:///PATH` whose path holds no character
that SQLAlchemy's URL parser would unquote or re-quote; anything else returns None and the
caller goes through SQLAlchemy's make_url (tests/unit/store/test_reader.py checks the two agree).
"""

from __future__ import annotations

import re
from typing import Optional

_PLAIN = re.compile(r"sqlite:///([\w./ ~+-]+)")


def sqlite_file(url: str) -> Optional[str]:
    """The database path of `sqlite:///PATH` (absolute when PATH starts with /); None for other
    URLs, in-memory ones, or paths with characters URL parsing would change."""
    m = _PLAIN.fullmatch(url)  # ":memory:" never matches: ":" is not a plain character
    return m.group(1) if m else None


def sqlite_url(path: str) -> Optional[str]:
    """`sqlite:///` + path, when that URL reads back as `path` (sqlite_file); else None."""
    url = "sqlite:///" + path
    return url if sqlite_file(url) == path else None
