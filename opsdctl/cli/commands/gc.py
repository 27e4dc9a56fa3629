"""`opsdctl gc`: remove code snapshots and stage outputs no queued or running chain needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console


def command(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Only show what would be removed."),
    keep: List[str] = typer.Option([], "--keep", metavar="VARIANT", help="Keep this variant's stage outputs (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"dry_run", "freed_bytes", "items": [...]}.'),
) -> None:
    """Remove code snapshots and stage outputs (checkpoints) that no queued or running chain needs.

    Logs, recipe files and the store stay, so status, show and compare are unchanged.
    """
    from opsdctl.identity.gc import collect

    app = App.of(ctx)
    cfg = app.config()
    report = collect(cfg, app.store(cfg), dry_run=dry_run, keep=keep)
    if as_json:
        print_json(report.to_json())
        return
    render_gc(console(), report)


def render_gc(con: Console, report) -> None:
    from rich.table import Table

    verb = "would free" if report.dry_run else "freed"
    if not report.items:
        con.print(f"nothing to remove (kept {report.kept_snapshots} snapshot(s) and the outputs of "
                  f"{report.kept_run_dirs} chain(s) that live chains need)")
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("what", "path", "size", "why"):
        t.add_column(col, overflow="fold")
    by_kind: dict[str, list] = {}
    for item in report.items:
        by_kind.setdefault(item.kind, []).append(item)
    for kind, items in by_kind.items():
        if kind == "object":  # one row for all of them: there can be thousands
            t.add_row("objects", f"{len(items)} file contents", _bytes(sum(i.bytes for i in items)), escape(items[0].why))
            continue
        for item in items:
            t.add_row(kind, escape(str(item.path)), _bytes(item.bytes), escape(item.why))
    con.print(t)
    con.print(f"{'dry run: ' if report.dry_run else ''}{verb} {_bytes(report.freed_bytes)}; kept "
              f"{report.kept_snapshots} snapshot(s) and the outputs of {report.kept_run_dirs} chain(s) live chains need")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
