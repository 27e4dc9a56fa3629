"""A chain's own view of its code snapshot: `<run_dir>/code/`, a tree of hard links to it.

Chains queued from the same code share one snapshot directory, and with `executor = "ray"`
several of them train at once. So every chain runs in a view: its own directories, every file a
hard link to the snapshot's (no bytes copied; the snapshot's files are read-only), symlinks
recreated. What a stage adds, or replaces by rename (the variant's recipe.env at
`[stages.train] recipe_env_path`, __pycache__), stays in its view; what it writes in place into
a shared file is found and undone before the next stage (snapshot_check.py). Where hard links
are refused, files are copied.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

NO_LINK_ERRNOS = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


def make_view(snapshot_root: Path, dest: Path) -> Path:
    """`dest` as a linked view of `snapshot_root` (reused when it is already there)."""
    snapshot_root, dest = Path(snapshot_root), Path(dest)
    if dest.is_dir():
        return dest
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    links = True
    try:
        for root, dirs, files in os.walk(snapshot_root):
            rel = Path(root).relative_to(snapshot_root)
            out = tmp / rel
            out.mkdir(parents=True, exist_ok=True)
            for name in dirs:  # symlinked directories are not walked into: recreate the link
                src = Path(root) / name
                if src.is_symlink():
                    os.symlink(os.readlink(src), out / name)
            for name in files:
                src, target = Path(root) / name, out / name
                if src.is_symlink():
                    os.symlink(os.readlink(src), target)
                    continue
                if links:
                    try:
                        os.link(src, target)
                        continue
                    except OSError as exc:
                        if exc.errno not in NO_LINK_ERRNOS:
                            raise
                        links = False
                shutil.copy2(src, target)
        os.rename(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
