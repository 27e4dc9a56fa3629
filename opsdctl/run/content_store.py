"""One copy per file content: the object store behind code snapshots taken outside git.

`<runs_dir>/code/objects/<aa>/<sha256>[.x]` holds each file content once, read-only (`.x`: the
executable variant, since hard links share their mode). A snapshot directory is a tree of hard
links to these objects, so a code edit costs only the files it changed, and a 300 MB checkpoint
left in code_dir is stored once however many snapshots contain it. An object no snapshot links
to any more (link count 1) is garbage: `opsdctl gc` removes it.

Objects are read-only so that a stage writing into a file of its snapshot in place cannot
corrupt every other snapshot sharing that content (it gets EACCES; replacing the file by
rename, as editors and atomic writers do, only changes its own snapshot).

Where the file system refuses hard links (some network mounts), files are copied instead and
no object is kept.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import uuid
from pathlib import Path

from opsdctl.errors import UserError
from opsdctl.fsutil import umask

OBJECTS = "objects"
CHUNK = 1 << 20
NO_LINK_ERRNOS = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


def objects_dir(code_root: Path) -> Path:
    return Path(code_root) / OBJECTS


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                return h.hexdigest()
            h.update(block)


def object_path(code_root: Path, digest: str, executable: bool) -> Path:
    return objects_dir(code_root) / digest[:2] / (digest + (".x" if executable else ""))


def has_object(code_root: Path, digest: str, executable: bool) -> bool:
    return object_path(code_root, digest, executable).is_file()


class Linker:
    """Places files of one snapshot: a hard link to the object when it can, else a copy."""

    def __init__(self, code_root: Path):
        self.code_root = Path(code_root)
        self.links = True

    def place(self, source: Path, digest: str, executable: bool, target: Path) -> None:
        mode = (0o555 if executable else 0o444) & ~umask()  # read-only, and no wider than the umask allows
        if self.links:
            obj = self._ensure_object(source, digest, executable, mode)
            try:
                os.link(obj, target)
                return
            except OSError as exc:
                if exc.errno not in NO_LINK_ERRNOS:
                    raise
                self.links = False  # this file system has no hard links: plain copies from now on
        _copy_checked(source, target, digest)
        os.chmod(target, mode)

    def _ensure_object(self, source: Path, digest: str, executable: bool, mode: int) -> Path:
        obj = object_path(self.code_root, digest, executable)
        if obj.is_file():
            return obj
        obj.parent.mkdir(parents=True, exist_ok=True)
        tmp = obj.parent / f".tmp-{digest[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _copy_checked(source, tmp, digest)
            os.chmod(tmp, mode)
            os.replace(tmp, obj)  # same content whoever wins a race
        finally:
            if tmp.exists():
                tmp.unlink()
        return obj


def _copy_checked(source: Path, dest: Path, digest: str) -> None:
    """Copy `source`, refusing it when its content is no longer the one hashed a moment ago."""
    h = hashlib.sha256()
    with open(source, "rb") as src, open(dest, "wb") as out:
        while True:
            block = src.read(CHUNK)
            if not block:
                break
            h.update(block)
            out.write(block)
    if h.hexdigest() != digest:
        dest.unlink()
        raise UserError(f"{source}: changed while its code snapshot was taken; queue again once it is written")


def orphan_objects(code_root: Path, also_unlinked: dict[tuple[int, int], int] | None = None) -> list[Path]:
    """Objects no snapshot links to. `also_unlinked` ((dev, ino) -> links about to be removed)
    counts those links as gone already (for a dry run)."""
    root = objects_dir(code_root)
    out = []
    if not root.is_dir():
        return out
    for sub in sorted(root.iterdir()):
        if not sub.is_dir():
            continue
        for obj in sorted(sub.iterdir()):
            if obj.name.startswith(".tmp-"):
                continue
            st = obj.lstat()
            going = (also_unlinked or {}).get((st.st_dev, st.st_ino), 0)
            if st.st_nlink - going <= 1:
                out.append(obj)
    return out


def drop_objects(code_root: Path, inodes: set[tuple[int, int]]) -> None:
    """Remove the objects that are these files (a content changed in place is no longer its hash)."""
    root = objects_dir(code_root)
    if not inodes or not root.is_dir():
        return
    for sub in root.iterdir():
        for obj in sub.iterdir() if sub.is_dir() else ():
            st = obj.lstat()
            if (st.st_dev, st.st_ino) in inodes:
                obj.unlink()


def remove_tree(path: Path) -> None:
    """rmtree that also removes the read-only entries of a snapshot."""
    def onerror(func, p, _exc):
        os.chmod(os.path.dirname(p), 0o755)
        func(p)

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=onerror)
    elif path.exists() or path.is_symlink():
        path.unlink()
