"""JSON a stage wrote, parsed within bounds.

A stage's files are untrusted input to the worker: `'[' * 200000 + ']' * 200000` in result.json
made Python's parser raise RecursionError, which crashed the worker, and crashed every restart
again in salvage. Everything the worker parses from a stage goes through here: a size cap
(checked before reading), the parser's own recursion guard turned into a plain error, and a
nesting cap checked without recursion, so what comes back can be walked by any later code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 16 << 20  # a result.json of 10,000 problems is ~1 MiB; parsed, 16 MiB is ~150 MiB of objects
MAX_DEPTH = 32  # result.json is 4 deep; progress and metrics records 2-3


class StageJsonError(ValueError):
    """Stage output that is not bounded, well-formed JSON (one line: where and why)."""


def loads(text: str, where: str) -> Any:
    if len(text) > MAX_FILE_BYTES:
        raise StageJsonError(f"{where}: {len(text)} characters, more than the {MAX_FILE_BYTES >> 20} MiB read")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StageJsonError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise StageJsonError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    if depth_over(doc, MAX_DEPTH):
        raise StageJsonError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    return doc


def read(path: str | os.PathLike, where: str | None = None) -> Any:
    """Parse the file at `path`, refusing one larger than MAX_FILE_BYTES before reading it."""
    path = Path(path)
    where = where or str(path)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise StageJsonError(f"{where}: {size} bytes, more than the {MAX_FILE_BYTES >> 20} MiB read")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StageJsonError(f"{where}: not UTF-8 JSON (byte at offset {exc.start})") from None
    return loads(text, where)


def depth_over(doc: Any, limit: int) -> bool:
    """True when lists/objects nest more than `limit` deep (an explicit stack: no recursion)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False
