"""A code snapshot is the same before every stage: sealed, recorded, checked, repaired.

Chains queued from the same code share one snapshot directory, and every chain runs in its own
view of it (code_view.py: private directories, files hard-linked to the snapshot's). What a
stage does in its view (a new file, a file replaced by rename, __pycache__) stays in its chain.
What it could do to others is write into a shared file in place: snapshot files are read-only,
but the owner can chmod them and root ignores modes. So when a snapshot is materialized its
entries are recorded (`<runs_dir>/code/<key>.manifest`: kind, mode, size, mtime of each), and
before each stage the snapshot and the chain's view are compared with that record, one lstat per
entry (no file is read: cheap for big repositories). An in-place write changes size or mtime:
- a git snapshot is rebuilt from its tree (fresh files) and the view's damaged entries relinked;
- a copy taken outside git cannot be rebuilt: the chain fails with one line, and the damaged
  snapshot and its file objects are dropped so that the next `queue` takes a clean one.
Not caught: a writer that restores the mtime on purpose (the record holds no content hashes).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Callable, Optional

from opsdctl.errors import UserError
from opsdctl.fsutil import atomic_write_text, umask

SUFFIX = ".manifest"
VERSION = 1


def manifest_path(root: Path) -> Path:
    return root.parent / (root.name + SUFFIX)


def _entry(p: Path) -> list:
    st = p.lstat()
    if stat.S_ISLNK(st.st_mode):
        return ["l", os.readlink(p)]
    if stat.S_ISDIR(st.st_mode):
        return ["d"]
    return ["f", stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns]


def _scan(root: Path) -> dict[str, list]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        base = Path(dirpath)
        for name in [*dirs, *files]:
            p = base / name
            out[p.relative_to(root).as_posix()] = _entry(p)
    return out


def seal(root: Path) -> None:
    """Make a freshly filled snapshot read-only (no wider than the umask allows), root last."""
    mask = umask()
    for dirpath, dirs, files in os.walk(root, topdown=False):
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                os.chmod(p, (0o555 if st.st_mode & 0o111 else 0o444) & ~mask)
        if dirpath != str(root):
            os.chmod(dirpath, 0o555 & ~mask)


def record(root: Path) -> dict[str, list]:
    entries = _scan(root)
    atomic_write_text(manifest_path(root), json.dumps({"version": VERSION, "entries": entries}))
    return entries


def load(root: Path) -> dict[str, list]:
    """The recorded entries; a snapshot made before records existed is recorded as it is now."""
    try:
        doc = json.loads(manifest_path(root).read_text())
        if doc.get("version") == VERSION:
            return doc["entries"]
    except (OSError, ValueError, KeyError):
        pass
    return record(root)


def _differs(base: Path, rel: str, want: list) -> bool:
    try:
        have = _entry(base / rel)
    except OSError:
        return True
    if want[0] == "d":
        return have[0] != "d"  # a view's directories are its own (their mode and mtime are not the snapshot's)
    return have != want


def damaged(base: Path, entries: dict[str, list], view: bool = False) -> list[str]:
    """Recorded entries that `base` no longer holds as recorded; for the snapshot itself (not a
    view) also the entries nobody recorded (a file a stage added to shared code)."""
    out = [rel for rel, want in entries.items() if _differs(base, rel, want)]
    if not view:
        out += sorted(set(_scan(base)) - set(entries))
    return out


def relink(root: Path, view: Path, rels: list[str], entries: dict[str, list]) -> None:
    """Put the snapshot's entries `rels` back into a chain's view (a link, else a copy)."""
    import shutil

    from opsdctl.identity.content_store import remove_tree

    for rel in sorted(rels, key=lambda r: r.count("/")):
        want, target = entries.get(rel), view / rel
        if want is None:
            continue
        if os.path.lexists(target) and not (want[0] == "d" and target.is_dir() and not target.is_symlink()):
            remove_tree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if want[0] == "d":
            target.mkdir(exist_ok=True)
        elif want[0] == "l":
            os.symlink(want[1], target)
        else:
            try:
                os.link(root / rel, target)
            except OSError:
                shutil.copy2(root / rel, target)


def ensure_intact(root: Path, view: Optional[Path], rebuild: Optional[Callable[[], Path]],
                  drop: Callable[[list[str]], None]) -> list[str]:
    """Check the shared snapshot `root` and the chain's `view` against the record; repair what can
    be repaired (rebuild: a fresh git materialization) and return what was repaired, in words.
    A copy that cannot be rebuilt is dropped (`drop`, with its damaged entries) and refused."""
    entries = load(root)
    words = []
    bad = damaged(root, entries)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        if rebuild is None:
            drop(bad)
            raise UserError(f"code snapshot {root.name[:12]} was changed after it was queued ({shown}); a copy taken "
                            "outside git cannot be rebuilt, so it was dropped: queue the variant again (`opsdctl queue "
                            "NAME`; `opsdctl requeue` would reuse the dropped copy)")
        root = rebuild()
        entries = load(root)
        words.append(f"code snapshot {root.name[:12]} was changed after it was queued ({shown}): rebuilt from git")
    if view is not None:
        stale = damaged(view, entries, view=True)
        if stale:
            relink(root, view, stale, entries)
            words.append(f"{len(stale)} file(s) of the chain's code view put back as queued")
    return words
