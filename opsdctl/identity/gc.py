"""`opsdctl gc`: remove the code snapshots and stage outputs that no live chain needs.

Live chains are the queued and running ones; a live chain also needs the chains it was
re-queued from (recovery may resume from their outputs) and, when it is eval-only, the chain
that trained its checkpoint. Everything else under runs_dir that
opsdctl made and can lose goes:
- code snapshots (`<runs_dir>/code/<key>/`) no live chain runs, and then the file objects no
  snapshot links to any more (content_store); a git snapshot is rebuilt from its commit
  (kept under refs/opsdctl/) if a chain ever needs it again, a copy taken outside git is not;
- stage outputs of finished chains: `<run_dir>/train/` (checkpoints), `<run_dir>/eval/`, and the
  chain's own view of its code (`<run_dir>/code/`); the logs, recipe files and everything in the
  store stay, so status, show and compare are unchanged;
- run dirs an older store left and the worker moved aside (`<id>.stale-*`), and temporary
  directories of snapshots that crashed half-way (older than an hour).
`--keep VARIANT` keeps that variant's stage outputs (a checkpoint you want to keep).
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from opsdctl.config import Config
from opsdctl.identity import content_store, snapshot_check
from opsdctl.identity.snapshot_lock import snapshot_lock
from opsdctl.store.engine import Store, all_chains, all_snapshots, find_variant
from opsdctl.store.states import State

LIVE = (State.QUEUED.value, State.RUNNING.value)
STAGE_OUTPUTS = ("train", "eval", "code")  # under a chain's run dir
TMP_AGE_S = 3600.0
_STALE = re.compile(r"^\d+\.stale-\d+$")


@dataclass
class Item:
    kind: str  # snapshot | stage-output | stale-run-dir | object | temporary
    path: Path
    why: str
    bytes: int = 0  # what removing it frees (files linked from elsewhere count where they last go)

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "why": self.why}


@dataclass
class GcReport:
    dry_run: bool
    items: list[Item]
    kept_snapshots: int
    kept_run_dirs: int

    @property
    def freed_bytes(self) -> int:
        return sum(i.bytes for i in self.items)

    def to_json(self) -> dict:
        return {"dry_run": self.dry_run, "freed_bytes": self.freed_bytes, "kept_snapshots": self.kept_snapshots,
                "kept_run_dirs": self.kept_run_dirs, "items": [i.to_json() for i in self.items]}


def collect(cfg: Config, store: Store, dry_run: bool = False, keep: Sequence[str] = ()) -> GcReport:
    runs_dir = cfg.runs_dir
    if not runs_dir.is_dir():
        return GcReport(dry_run, [], 0, 0)
    with snapshot_lock(runs_dir, exclusive=True):
        needed_keys, needed_chains, finished = _needed(store, keep)
        items = _snapshot_items(runs_dir, needed_keys) + _run_dir_items(runs_dir, finished, needed_chains)
        items = [i for i in items if _inside(runs_dir, i.path)]
        going = _links_going(items)
        orphans = content_store.orphan_objects(runs_dir / "code", also_unlinked=going)
        items += [Item("object", p, "no snapshot links to this file content") for p in orphans]
        _attribute_bytes(items)
        if not dry_run:
            for item in items:
                content_store.remove_tree(item.path)
        return GcReport(dry_run, items, len(needed_keys), len(needed_chains))


def _inside(runs_dir: Path, path: Path) -> bool:
    """`path` sits in a real directory under runs_dir: removing it (a link is only unlinked)
    cannot reach anything outside, whatever a symlinked `runs/<id>` points at."""
    try:
        path.parent.resolve(strict=True).relative_to(runs_dir.resolve(strict=True))
    except (OSError, RuntimeError, ValueError):
        return False
    return True


def _needed(store: Store, keep: Sequence[str]) -> tuple[set[str], set[int], set[int]]:
    """(snapshot keys live chains run, chain ids whose outputs are needed, finished chain ids)."""
    with store.read() as s:
        kept_variants = {find_variant(s, ref).id for ref in keep}
        chains = all_chains(s)
        snaps = {row.id: row for row in all_snapshots(s)}
    by_id = {c.id: c for c in chains}
    needed: set[int] = set()
    for c in chains:
        if c.state in LIVE or c.variant_id in kept_variants:
            todo = [c]
            while todo:  # and what it was re-queued from, and the chain whose checkpoint it evaluates
                cur = todo.pop()
                if cur is None or cur.id in needed:
                    continue
                needed.add(cur.id)
                todo += [by_id.get(i) for i in (cur.requeued_from, getattr(cur, "trained_by", None)) if i]
    keys = {snaps[c.snapshot_id].key for c in chains
            if c.state in LIVE and c.snapshot_id in snaps and snaps[c.snapshot_id].kind != "live"}
    finished = {c.id for c in chains if c.state not in LIVE}
    return keys, needed, finished


def _snapshot_items(runs_dir: Path, needed_keys: set[str]) -> list[Item]:
    code = runs_dir / "code"
    out = []
    if not code.is_dir():
        return out
    now = time.time()
    for entry in sorted(code.iterdir()):
        if entry.name in (content_store.OBJECTS, ".lock"):
            continue
        if entry.name.startswith(".tmp-"):
            if now - entry.lstat().st_mtime > TMP_AGE_S:
                out.append(Item("temporary", entry, "left by a snapshot that did not finish"))
            continue
        if entry.name.endswith(snapshot_check.SUFFIX):
            if entry.name[:-len(snapshot_check.SUFFIX)] not in needed_keys:
                out.append(Item("snapshot", entry, "the record of a snapshot no queued or running chain runs"))
            continue
        if entry.is_dir() and entry.name not in needed_keys:
            out.append(Item("snapshot", entry, "no queued or running chain runs this code"))
    return out


def _run_dir_items(runs_dir: Path, finished: set[int], needed: set[int]) -> list[Item]:
    out = []
    for entry in sorted(runs_dir.iterdir(), key=lambda p: p.name):
        if entry.is_symlink():
            continue  # not a run dir opsdctl made: never followed
        if _STALE.match(entry.name) and entry.is_dir():
            out.append(Item("stale-run-dir", entry, "left by an older store; the worker moved it aside"))
            continue
        if not entry.name.isdigit() or not entry.is_dir():
            continue
        chain_id = int(entry.name)
        if chain_id not in finished or chain_id in needed:
            continue  # live, kept, or not this store's
        for name in STAGE_OUTPUTS:
            p = entry / name
            if p.exists() or p.is_symlink():
                out.append(Item("stage-output", p, f"chain {chain_id} is finished; its log and scores stay"))
    return out


def _files(path: Path):
    if path.is_symlink() or not path.is_dir():
        yield path
        return
    for root, _dirs, files in os.walk(path):
        for name in files:
            yield Path(root) / name


def _links_going(items: list[Item]) -> dict[tuple[int, int], int]:
    going: dict[tuple[int, int], int] = {}
    for item in items:
        for f in _files(item.path):
            try:
                st = f.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                going[(st.st_dev, st.st_ino)] = going.get((st.st_dev, st.st_ino), 0) + 1
    return going


def _attribute_bytes(items: list[Item]) -> None:
    """Each file's bytes count once, for the item holding its last remaining link."""
    going = _links_going(items)
    seen: set[tuple[int, int]] = set()
    for item in items:
        total = 0
        for f in _files(item.path):
            try:
                st = f.lstat()
            except FileNotFoundError:
                continue
            ident = (st.st_dev, st.st_ino)
            if not stat.S_ISREG(st.st_mode) or ident in seen:
                continue
            if going.get(ident, 0) >= st.st_nlink:
                seen.add(ident)
                total += st.st_size
        item.bytes = total
