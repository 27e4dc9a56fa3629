"""Where commands write: a rich console sized for logs when piped, `--json` documents, warnings
and the one-line error."""

from __future__ import annotations

import json
import os
import sys


def console(stderr: bool = False):
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = 160  # piped into a log or a CI page: don't squeeze tables to 80 columns
    return con


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def warn(text: str) -> None:
    console(stderr=True).print(f"[yellow]warning:[/yellow] {escape(text)}")


def error_line(text: str) -> None:
    from rich.console import Console

    from opsdctl.errors import one_line

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[red]error:[/red] {escape(one_line(text))}")
