"""`opsdctl code CHAIN --to DIR`: write out the code a chain's checkpoint was trained with.

A winner whose method lives in code (an edited trainer or collator) only scores officially if that
code is what gets submitted; recipe.env carries hyper-parameters only. This writes the chain's
code snapshot (its training chain's, for an eval-only chain) as plain, writable files into DIR,
whichever kind it is (a git tree, re-extracted from the repository if the copy was collected; or
a content-addressed copy).

Safe by construction: DIR must not exist or be empty (there is no --force: overwriting a
workspace in place would leave its stale files beside the snapshot's), and the files are written
to a private temporary directory beside DIR and renamed into place, so a failure leaves nothing
half-written.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from opsdctl.errors import UserError
from opsdctl.identity import snapshot as snap
from opsdctl.store.open_read import open_reader


@dataclass(frozen=True)
class CodeWritten:
    chain_id: int
    trained_by: int  # the chain whose training used this code
    kind: str  # git | copy
    tree: str
    commit: Optional[str]
    files: int
    dest: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


def _check_dest(dest: Path) -> None:
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UserError(f"--to {dest}: exists and is not a directory; name a new or empty directory")
    if dest.is_dir() and any(dest.iterdir()):
        raise UserError(f"--to {dest}: directory is not empty; name a new or empty directory "
                        "(then copy what you need over your workspace)")
    if not dest.parent.is_dir():
        raise UserError(f"--to {dest}: parent directory {dest.parent} does not exist; create it first")


def write_code(store, runs_dir: Path, chain_id: int, dest: Path) -> CodeWritten:
    """Write chain `chain_id`'s training code snapshot into `dest` (module docstring)."""
    from opsdctl.stats.scores import training_snapshot_ids

    dest = Path(dest).expanduser().absolute()
    with open_reader(store).snapshot() as reader:  # on the Store's engine: nothing to close
        chain = reader.get_chain(chain_id)
        row = reader.code_snapshot(training_snapshot_ids(reader, [chain]).get(chain.id))
    trainer = chain.trained_by if chain.eval_only and chain.trained_by else chain.id
    if row is None:
        raise UserError(f"chain {chain_id}: no code snapshot is recorded for its training "
                        "(an outside checkpoint, or queued before snapshots were taken)")
    kind, key, source, prefix, commit = row.kind, row.key, row.source_dir, row.prefix or "", row.commit
    if kind == "live":
        raise UserError(f"chain {chain_id}: trained on the live code dir {source} (snapshot_code = false): "
                        "no snapshot was kept; set snapshot_code = true to freeze code at queue time")
    _check_dest(dest)
    src = snap.ensure_materialized(kind, key, source, Path(runs_dir), prefix)
    if not src.is_dir():
        raise UserError(f"chain {chain_id}: its code snapshot {src} is gone and cannot be rebuilt")
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(src, tmp, symlinks=True, copy_function=shutil.copyfile)
        files = _make_writable(tmp, src)
        if dest.is_dir():
            dest.rmdir()  # empty, checked above
        os.rename(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return CodeWritten(chain_id, trainer, kind, key, commit, files, str(dest))


def _make_writable(root: Path, src: Path) -> int:
    """Snapshot files are read-only (shared objects); the written-out code is the user's own:
    owner-writable, executable where the snapshot's file was. Returns the number of files."""
    n = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if p.is_symlink():
                continue
            x = os.stat(src / p.relative_to(root)).st_mode & stat.S_IXUSR
            os.chmod(p, 0o755 if x else 0o644)
            n += 1
    return n
