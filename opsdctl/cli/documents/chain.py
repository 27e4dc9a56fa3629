"""The chain document: one chain as `status` lists it, its run as `show` lists it, and the tail of
its current stage's log; `opsdctl chain ID` renders it, the dashboard's chain page too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from opsdctl.store.reader import Reader

LOG_TAIL_BYTES = 64 * 1024  # a log's tail is read from its end: a 10 GB log costs the same


def chain_doc(reader: Reader, chain_id: int, lines: int = 40) -> dict:
    """`opsdctl chain ID --json`: the chain as `status` lists it (stages, progress), its run as
    `show` lists it (score, per-problem counts, training curve, recipe check, code), and the
    last `lines` lines of its current stage's log."""
    from opsdctl.cli.documents.status import chain_view
    from opsdctl.stats.scores import run_views

    with reader.snapshot() as r:
        chain = r.get_chain(chain_id)
        variant = r.variant(chain.variant_id)
        run = run_views(r, [chain])[0]
        doc = chain_view(r, chain, variant)
    stage = next((st for st in reversed(doc.get("stages", [])) if st["name"] == chain.stage), None)
    doc["run"] = run
    doc["log_tail"] = None if stage is None else {"stage": stage["name"], "path": stage["log"],
                                                   "lines": log_tail(stage["log"], lines)}
    return doc


def log_tail(path: Optional[str], lines: int) -> list[str]:
    """The last `lines` lines of a log ([] when there is none yet)."""
    if not path or lines <= 0:
        return []
    try:
        with open(Path(path), "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


