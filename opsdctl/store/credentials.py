"""The store's credentials: masked in every message, kept out of every stage's environment.

A database URL is read as text here, not through SQLAlchemy's parser: a password with an
unencoded '@' (`postgresql://u:Pa@ss@host/db`) parses as password `Pa` and host `ss@host`, so
masking the parsed password printed the rest of it. The user information runs to the LAST '@'
of the URL; masking too much of a malformed URL is safe, too little is not.
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional
from urllib.parse import quote, quote_plus, unquote

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
LIBPQ_SECRETS = ("PGPASSWORD", "PGPASSFILE")  # libpq reads the password from these
MIN_SECRET = 4  # shorter values would mask (or scrub) unrelated text


def _split(url: str) -> Optional[tuple[str, str, str, str]]:
    """(scheme + '//', user, password, host and the rest) when the URL carries a password."""
    m = _SCHEME.match(url)
    head = m.group(0) if m else ""
    rest = url[len(head):]
    at = rest.rfind("@")
    if at < 0:
        return None
    user, colon, password = rest[:at].partition(":")
    if not colon:
        return None
    return head, user, password, rest[at + 1:]


def mask_url(url: str) -> str:
    """`url` with its password (everything between 'user:' and the last '@') shown as ***."""
    parts = _split(url)
    if parts is None:
        return url
    head, user, _password, tail = parts
    return f"{head}{user}:***@{tail}"


def url_password(url: str) -> Optional[str]:
    parts = _split(url)
    return parts[2] if parts and parts[2] else None


def secrets(url: Optional[str], environ: Mapping[str, str] = os.environ) -> set[str]:
    """Every spelling of the store's password: in the URL (raw, decoded, encoded) and PGPASSWORD."""
    out = set()
    raw = url_password(url) if url else None
    if raw:
        plain = unquote(raw)
        out |= {raw, plain, quote_plus(plain), quote(plain, safe="")}
        # An unencoded '@' splits it: a driver quotes the pieces as user, password and host.
        out |= {piece for piece in raw.split("@") if len(piece) >= MIN_SECRET}
    env_pw = environ.get("PGPASSWORD")
    if env_pw and len(env_pw) >= MIN_SECRET:
        out.add(env_pw)
    return {s for s in out if s}


def redact(message: str, url: Optional[str] = None) -> str:
    """`message` with the store's password replaced by *** (longest spelling first)."""
    for secret in sorted(secrets(url), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message


def scrub_env(env: Mapping[str, str], url: Optional[str]) -> dict[str, str]:
    """`env` without the store's credentials: libpq's password variables, and any variable whose
    value holds the password or the store URL itself (DATABASE_URL, a helper's copy...)."""
    found = secrets(url, env)
    within = {s for s in found if len(s) >= MIN_SECRET}  # a short one only where it is the whole value
    whole = {u for u in (url, mask_url(url) if url else None) if u and "://" in u and not u.startswith("sqlite")}
    return {k: v for k, v in env.items()
            if k not in LIBPQ_SECRETS and v not in found and not any(s in v for s in within | whole)}
