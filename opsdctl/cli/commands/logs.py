"""`opsdctl logs`: a chain's stage log, its tail, or followed until the stage ends."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TextIO

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App

if TYPE_CHECKING:
    from opsdctl.store.reader import Reader


def command(
    ctx: typer.Context,
    chain_id: int = typer.Argument(..., metavar="CHAIN_ID", callback=args.chain_ids),
    stage: Optional[str] = typer.Option(None, "--stage", help="train or eval [default: the chain's current/last stage]."),
    lines: int = typer.Option(40, "--lines", "-n", min=0, help="How many lines from the end (0 = all).",
                              callback=args.count("--lines")),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as the log grows, until the stage ends."),
) -> None:
    """Print a chain's stage log (its path is in `opsdctl status --json`)."""
    app = App.of(ctx)
    cfg = app.config()
    reader = app.reader(cfg)
    path, text = stage_log(reader, chain_id, stage, lines)
    sys.stdout.write(text)
    sys.stdout.flush()
    if follow:
        follow_log(reader, chain_id, path, sys.stdout)


def _pick_stage(reader: Reader, chain_id: int, stage: Optional[str]):
    from opsdctl.errors import UserError

    with reader.snapshot():
        chain = reader.get_chain(chain_id)
        rows = reader.stages_of(chain_id)
    if stage is not None:
        if stage not in ("train", "eval"):
            raise UserError(f"--stage {stage!r}: must be train or eval")
        row = next((r for r in rows if r.name == stage), None)
        if row is None:
            raise UserError(f"chain {chain_id} has no {stage} stage yet (it is {chain.state})")
        return row
    if not rows:
        raise UserError(f"chain {chain_id} has not started yet (it is {chain.state}); no log")
    return rows[-1]


def stage_log(reader: Reader, chain_id: int, stage: Optional[str], lines: int) -> tuple[Path, str]:
    from opsdctl.errors import UserError

    row = _pick_stage(reader, chain_id, stage)
    path = Path(row.log_path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise UserError(f"chain {chain_id}: log {path} is missing") from None
    if lines:
        text = "".join(text.splitlines(keepends=True)[-lines:])
    return path, text


def follow_log(reader: Reader, chain_id: int, path: Path, out: TextIO, poll: float = 0.5) -> None:
    """Print what is appended to `path` until the chain's stage using it ends."""

    with open(path, "rb") as f:
        f.seek(0, 2)
        while True:
            chunk = f.read()
            if chunk:
                out.write(chunk.decode("utf-8", errors="replace"))
                out.flush()
                continue
            running = [st for st in reader.stages_of(chain_id) if st.log_path == str(path) and st.state == "running"]
            if not running:
                rest = f.read()
                if rest:
                    out.write(rest.decode("utf-8", errors="replace"))
                return
            time.sleep(poll)
