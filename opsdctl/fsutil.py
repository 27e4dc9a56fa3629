"""Small file-system helpers: atomic writes and safe directory moves.

Every file opsdctl writes for a user (config, recipe.env, recipe.json, exported recipes) is
written to a temporary file in the same directory and renamed over the target, so a reader
never sees half a file and a crash never leaves one behind. A new file gets the mode the umask
allows; a file written over keeps its own mode.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, Sequence


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)  # elsewhere: the classic read-by-setting, put back at once
    os.umask(old)
    return old


def new_file_mode(path: Path, default: int = 0o666) -> int:
    """The mode a file we (re)write at `path` gets: an existing file's own mode (a 0600 file
    stays private), else `default` as the umask allows (umask 077 -> 0600)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return default & ~umask()


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = new_file_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_tail(path: str | os.PathLike, max_bytes: int = 65536) -> str:
    """The last `max_bytes` of a text file ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def unwritable_dir(path: str | os.PathLike) -> str | None:
    """Why files cannot be created in `path` (made if missing), or None when they can."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".opsdctl-write-check.", dir=path)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def glob_regex(pattern: str) -> re.Pattern:
    """A path glob as .gitignore reads it: `*` and `?` stay within one path component, `**`
    crosses them (`**/x`, `x/**`, `a/**/b`), `[...]` is a character class; a pattern with no
    '/' but a trailing one matches a name at any depth, one with a '/' is anchored at the root."""
    body = pattern.strip("/") if pattern.endswith("/") else pattern.lstrip("/")
    anchored = "/" in body or pattern.startswith("/")
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if body.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = body.find("]", i + 2 if body[i + 1:i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                inner = body[i + 1:end]
                inner = "^" + inner[1:] if inner.startswith("!") else inner
                out.append("[" + inner.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile(("" if anchored else "(?:.*/)?") + "".join(out) + r"\Z", re.DOTALL)


class PathMatcher:
    """Whether a '/'-separated relative path, or a directory above it, matches one of the globs."""

    def __init__(self, patterns: Sequence[str]):
        self.patterns = tuple(patterns)
        self._regexes = [glob_regex(p) for p in self.patterns]

    def __bool__(self) -> bool:
        return bool(self._regexes)

    def __call__(self, rel: str) -> bool:
        parts = rel.split("/")
        for k in range(1, len(parts) + 1):
            prefix = "/".join(parts[:k])
            if any(r.match(prefix) for r in self._regexes):
                return True
        return False
