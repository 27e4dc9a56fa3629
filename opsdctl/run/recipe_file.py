"""The variant's recipe.env where the user's train script reads it (`[stages.train] recipe_env_path`).

A script such as `train_capped.sh` reads `submission/recipe.env` from the workspace, not from its
command line, so without this every variant trains whatever that file holds. For the train
stage the worker puts the variant's recipe.env at `recipe_env_path` (relative to the chain's
code dir), atomically, and puts back whatever was there afterwards.

Crash safety: before the file is touched, a journal (`<run_dir>/recipe_env.restore.json`) says
where it goes, where the original was saved (a hard link, else a copy, in the run dir) and the
sha256 of what we wrote. `restore()` after the stage, and `restore_after_crash()` when recovery
finds a chain its dead worker left running, put the original back, but only while the file
still holds what we wrote: a file someone edited since is left as it is (and said so).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from opsdctl.fsutil import atomic_write_json, atomic_write_text

JOURNAL = "recipe_env.restore.json"
BACKUP = "recipe_env.original"


def _sha(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def _preserve(target: Path, backup: Path) -> None:
    """Keep the original aside without moving it (it stays readable where it is)."""
    if backup.exists() or backup.is_symlink():
        backup.unlink()
    try:
        os.link(target, backup, follow_symlinks=False)
    except OSError:
        shutil.copy2(target, backup, follow_symlinks=False)


@dataclass
class Installed:
    journal: Path

    def restore(self, report: Callable[[str], None] = lambda m: None) -> None:
        restore_from(self.journal, report)


def install(code_dir: Path, rel_path: str, text: str, run_dir: Path) -> Installed:
    """Put `text` at code_dir/rel_path for a train stage; the original is restorable."""
    target = Path(code_dir) / rel_path
    _refuse_escape(Path(code_dir), rel_path, target)
    run_dir = Path(run_dir)
    journal = run_dir / JOURNAL
    if journal.exists():  # a restore that never ran (this run dir's earlier attempt)
        restore_from(journal)
    backup = run_dir / BACKUP
    existed = target.exists() or target.is_symlink()
    if existed and target.is_dir():
        from opsdctl.errors import UserError

        raise UserError(f"[stages.train] recipe_env_path {rel_path!r}: {target} is a directory; name a file")
    missing_dirs = []
    d = target.parent
    while not d.exists() and d != Path(code_dir):
        missing_dirs.append(str(d))
        d = d.parent
    atomic_write_json(journal, {
        "target": str(target), "backup": str(backup) if existed else None,
        "installed_sha256": hashlib.sha256(text.encode()).hexdigest(), "created_dirs": missing_dirs,
    })
    if existed:
        _preserve(target, backup)
    atomic_write_text(target, text)
    return Installed(journal)


def _refuse_escape(code_dir: Path, rel_path: str, target: Path) -> None:
    """The recipe goes into the chain's own code, never through a symlinked directory to where
    that link points (another chain's view, the shared snapshot, someone's home)."""
    from opsdctl.errors import UserError

    root = os.path.realpath(code_dir)
    where = os.path.realpath(target.parent)  # resolves the links on the way; a missing tail stays as written
    if os.path.commonpath([root, where]) != root:
        raise UserError(f"[stages.train] recipe_env_path {rel_path!r}: {target.parent} is a symlink that leads outside "
                        f"the chain's code (to {where}); make it a real directory in your code")


def restore_from(journal: Path, report: Callable[[str], None] = lambda m: None) -> Optional[str]:
    """Undo an install recorded in `journal`; returns what was done, in words."""
    try:
        doc = json.loads(Path(journal).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        Path(journal).unlink(missing_ok=True)
        return None
    target = Path(doc["target"])
    backup = Path(doc["backup"]) if doc.get("backup") else None
    current = _sha(target)
    if current is not None and current != doc.get("installed_sha256"):
        if backup is None or current != _sha(backup):  # not ours any more: someone edited it
            said = f"{target} changed while the train stage ran; left as it is"
            report(said)
        else:
            said = None  # never replaced (we stopped before writing): nothing to undo
    elif backup is not None and (backup.exists() or backup.is_symlink()):
        os.replace(backup, target)
        said = f"restored the original {target}"
    else:
        target.unlink(missing_ok=True)
        for d in doc.get("created_dirs") or []:  # innermost first
            try:
                os.rmdir(d)
            except OSError:
                break
        said = f"removed {target} (there was none before)"
    if backup is not None:
        backup.unlink(missing_ok=True)
    Path(journal).unlink(missing_ok=True)
    return said


def restore_after_crash(run_dir: Path, report: Callable[[str], None] = lambda m: None) -> Optional[str]:
    """Recovery: put back what a train stage of a dead worker left at recipe_env_path."""
    journal = Path(run_dir) / JOURNAL
    if not journal.exists():
        return None
    return restore_from(journal, report)
