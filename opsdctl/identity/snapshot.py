"""Code snapshots: freeze the code a chain will run at the moment it is queued.

In a git repository: copy the index to a temporary one, `git add -A` into it (honours
.gitignore, so untracked non-ignored files are included and the user's staging area is never
touched), `write-tree`, and `commit-tree` on top of HEAD. The commit is kept alive under
`refs/opsdctl/snapshots/<tree>` (so `git gc` never drops it) and the tree is materialized once,
with `git archive`, into `<runs_dir>/code/<tree>/`. We record HEAD, whether the working tree
was dirty, and the diff stat against HEAD.

Outside git: a content-addressed copy of code_dir in `<runs_dir>/code/<sha256>/`, whose files
are hard links into one object per file content (opsdctl/identity/content_store.py), so an edit
stores only the files it changed.

Materialization is race-free: extract into a private temporary directory, then rename it into
place; if another process won the race, ours is discarded.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from opsdctl.errors import UserError
from opsdctl.fsutil import PathMatcher, umask
from opsdctl.identity import content_store, snapshot_check

REF_PREFIX = "refs/opsdctl/snapshots/"
SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", "node_modules"}
MAX_COPY_BYTES = 2 << 30  # refuse to copy more than 2 GiB of code outside git
DIFFSTAT_MAX_CHARS = 20000
# What to do about a snapshot that is gone: a re-queued chain keeps its original's snapshot.
QUEUE_AGAIN = ("`opsdctl requeue` would reuse it, so queue the variant again (`opsdctl queue NAME`), "
               "which snapshots the code as it is now")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "opsdctl",
    "GIT_AUTHOR_EMAIL": "opsdctl@localhost",
    "GIT_COMMITTER_NAME": "opsdctl",
    "GIT_COMMITTER_EMAIL": "opsdctl@localhost",
    "GIT_TERMINAL_PROMPT": "0",
}


@dataclass(frozen=True)
class Snapshot:
    kind: str  # "git" | "copy" | "live"
    key: str  # tree id | sha256 | the live code_dir
    source_dir: str
    commit: Optional[str] = None
    head: Optional[str] = None
    dirty: bool = False
    diffstat: str = ""
    prefix: str = ""  # code_dir relative to the repository root ("" = the root)
    path: str = ""  # where the stages run: materialized root / prefix
    added_bytes: int = 0  # new bytes this snapshot stored (0: nothing new, or it existed)
    largest: tuple = ()  # ((bytes, path), ...): the largest files it added, for the size warning


def code_path(runs_dir: Path, key: str, prefix: str = "") -> Path:
    root = Path(runs_dir) / "code" / key
    return root / prefix if prefix else root


def take(code_dir: Path, runs_dir: Path, exclude: Sequence[Path] = (), enabled: bool = True,
         patterns: Sequence[str] = ()) -> Snapshot:
    """Snapshot `code_dir` and materialize it; `exclude` (runs dir, db files) and the paths the
    globs `patterns` match (relative to code_dir, as in .gitignore) never enter it."""
    code_dir = Path(code_dir).resolve()
    if not code_dir.is_dir():
        raise UserError(f"code_dir {code_dir}: not a directory (check code_dir in opsdctl.toml)")
    if not enabled:
        return Snapshot(kind="live", key=str(code_dir), source_dir=str(code_dir), path=str(code_dir))
    matcher = PathMatcher(patterns)
    top = _git_toplevel(code_dir)
    if top is not None:
        snap = _take_git(code_dir, top, exclude, matcher)
        fresh = not code_path(runs_dir, snap.key).is_dir()
        root = materialize_git(top, snap.key, runs_dir)
        if fresh:
            sizes = _tree_sizes(top, snap.key)
            snap = Snapshot(**{**snap.__dict__, "added_bytes": sum(n for n, _ in sizes),
                               "largest": tuple((n, shown_name(p)) for n, p in sorted(sizes, reverse=True)[:3])})
    else:
        snap, root = _take_copy(code_dir, runs_dir, exclude, matcher)
    path = root / snap.prefix if snap.prefix else root
    return Snapshot(**{**snap.__dict__, "path": str(path)})


# --- git ----------------------------------------------------------------------------------


def _git(args: Sequence[str], cwd: Path, env: Optional[dict] = None, check: bool = True, binary: bool = False,
         stdin: Optional[str] = None):
    full_env = dict(os.environ, **_GIT_ENV)
    full_env.pop("GIT_DIR", None)
    full_env.pop("GIT_WORK_TREE", None)
    if env:
        full_env.update(env)
    # File names are bytes to git: one that is not UTF-8 round-trips as surrogates, never a traceback.
    proc = subprocess.run(
        ["git", *args], cwd=str(cwd), env=full_env, capture_output=True, text=not binary, input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL, errors=None if binary else "surrogateescape",
    )
    if check and proc.returncode != 0:
        err = proc.stderr if not binary else proc.stderr.decode(errors="replace")
        raise UserError(f"git {' '.join(args[:2])} in {cwd} failed: {' '.join(err.split())[:300]}")
    return proc


def _git_toplevel(path: Path) -> Optional[Path]:
    if shutil.which("git") is None:
        return None
    proc = _git(["rev-parse", "--show-toplevel"], cwd=path, check=False)
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.strip()).resolve()


def shown_name(name: str) -> str:
    """A file name for messages and the store: undecodable bytes as \\xNN escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _take_git(code_dir: Path, top: Path, exclude: Sequence[Path], matcher: PathMatcher) -> Snapshot:
    head_proc = _git(["rev-parse", "--verify", "-q", "HEAD"], cwd=top, check=False)
    head = head_proc.stdout.strip() if head_proc.returncode == 0 else None
    real_index = Path(_git(["rev-parse", "--git-path", "index"], cwd=top).stdout.strip())
    if not real_index.is_absolute():
        real_index = top / real_index
    own = _own_paths(top, exclude)
    # `git add` refuses a pathspec naming an ignored path, so only the paths the user's ignore
    # rules do not already keep out are excluded by pathspec; tracked ones are dropped below.
    ignored = _ignored(top, own)
    excludes = [f":(exclude,top){rel}" for rel in own if rel not in ignored]
    with tempfile.TemporaryDirectory(prefix="opsdctl-index-") as tmp:
        index = Path(tmp) / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        if real_index.is_file():
            # copy2 keeps the index mtime too: git then re-reads the files changed in the second the index
            # was written (its racy-clean rule), which a fresh mtime would hide behind the stat cache
            shutil.copy2(real_index, index)  # keeps git's stat cache: `add -A` only hashes changes
        elif head:
            _git(["read-tree", head], cwd=top, env=env)
        _git(["add", "-A", "--", ".", *excludes], cwd=top, env=env)
        if own:  # our files may be tracked (committed by mistake): never in a snapshot
            _git(["rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *(f":(top,literal){rel}" for rel in own)],
                 cwd=top, env=env)
        left_out = _drop_matching(top, code_dir, env, matcher)
        tree = _git(["write-tree"], cwd=top, env=env).stdout.strip()
    dirty = True
    diffstat = "(no commits yet: the whole tree is new)"
    if head:
        head_tree = _git(["rev-parse", f"{head}^{{tree}}"], cwd=top).stdout.strip()
        # Our own files, committed or not, are never in the snapshot: their absence is not a change.
        beside_own = ["--", ".", *(f":(exclude,top,literal){rel}" for rel in [*own, *left_out])]
        diffstat = _git(["diff", "--stat", head_tree, tree, *beside_own], cwd=top).stdout.strip()
        dirty = bool(diffstat)
    commit = _keep_alive(top, tree, head)
    prefix = code_dir.relative_to(top).as_posix()
    return Snapshot(
        kind="git",
        key=tree,
        source_dir=str(code_dir),
        commit=commit,
        head=head,
        dirty=dirty,
        diffstat=diffstat[:DIFFSTAT_MAX_CHARS],
        prefix="" if prefix == "." else prefix,
    )


def _drop_matching(top: Path, code_dir: Path, env: dict, matcher: PathMatcher) -> list[str]:
    """Remove from the temporary index the files under code_dir that `matcher` excludes; their
    paths relative to the repository."""
    if not matcher:
        return []
    prefix = code_dir.relative_to(top).as_posix()
    prefix = "" if prefix == "." else prefix + "/"
    listed = _git(["ls-files", "-z", "--cached", "--", "."], cwd=top, env=env).stdout.split("\0")
    drop = [p for p in listed if p and p.startswith(prefix) and matcher(p[len(prefix):])]
    if drop:
        _git(["rm", "-q", "--cached", "--ignore-unmatch", "--pathspec-from-file=-", "--pathspec-file-nul"],
             cwd=top, env={**env, "GIT_LITERAL_PATHSPECS": "1"}, stdin="\0".join(drop) + "\0")
    return drop


def _own_paths(top: Path, exclude: Sequence[Path]) -> list[str]:
    """opsdctl's own files (store, WAL/SHM, locks, runs dir) inside the repository, relative to it."""
    out = []
    for p in exclude:
        p = Path(p).resolve()
        try:
            rel = p.relative_to(top)
        except ValueError:
            continue
        if str(rel) != ".":
            out.append(rel.as_posix())
    return out


def _ignored(top: Path, rels: Sequence[str]) -> set[str]:
    """The paths among `rels` that the repository's ignore rules already exclude."""
    if not rels:
        return set()
    proc = _git(["check-ignore", "-z", "--stdin"], cwd=top, check=False, stdin="\0".join(rels) + "\0")
    if proc.returncode not in (0, 1):  # 1: none is ignored
        raise UserError(f"git check-ignore in {top} failed: {' '.join(proc.stderr.split())[:300]}")
    return {p for p in proc.stdout.split("\0") if p}


def _keep_alive(top: Path, tree: str, head: Optional[str]) -> str:
    """A commit of `tree` referenced under refs/opsdctl/, created once per tree."""
    ref = REF_PREFIX + tree
    for _attempt in range(10):
        existing = _git(["rev-parse", "--verify", "-q", ref], cwd=top, check=False)
        if existing.returncode == 0:
            return existing.stdout.strip()
        parents = ["-p", head] if head else []
        commit = _git(["commit-tree", tree, *parents, "-m", f"opsdctl code snapshot {tree[:12]}"], cwd=top).stdout.strip()
        # The empty old value means "create only": a concurrent queue may have made it first.
        made = _git(["update-ref", "-m", "opsdctl snapshot", ref, commit, ""], cwd=top, check=False)
        if made.returncode == 0:
            return commit
        time.sleep(0.05)
    raise UserError(f"{top}: could not record the code snapshot ref {ref}; is the repository writable?")


def _tree_sizes(top: Path, tree: str) -> list[tuple[int, str]]:
    """(bytes, path) of every file in `tree`."""
    out = []
    for entry in _git(["ls-tree", "-r", "-l", "-z", tree], cwd=top).stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 4 and parts[1] == "blob" and parts[3].isdigit():
            out.append((int(parts[3]), path))
    return out


def materialize_git(top: Path, tree: str, runs_dir: Path) -> Path:
    final = code_path(runs_dir, tree)
    if final.is_dir():
        return final
    archive = _git(["archive", "--format=tar", tree], cwd=top, binary=True).stdout
    return _install(final, lambda dest: _extract_tar(archive, dest))


def _extract_tar(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        try:
            tar.extractall(dest, filter="tar")
        except TypeError:  # pragma: no cover - Python without extraction filters
            tar.extractall(dest)


def _install(final: Path, fill) -> Path:
    """Fill a private temporary directory, seal it read-only, then rename it to `final` (first
    one wins) and record its entries (snapshot_check.py)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        fill(tmp)
        snapshot_check.seal(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
        else:
            snapshot_check.record(final)
            os.chmod(final, 0o555 & ~umask())
    finally:
        if tmp.exists():
            content_store.remove_tree(tmp)
    return final


def _aside(root: Path) -> Path:
    """Move a damaged snapshot out of the way (gc removes what remains of it)."""
    aside = root.parent / f".tmp-damaged-{root.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    os.chmod(root, 0o700)
    os.rename(root, aside)
    snapshot_check.manifest_path(root).unlink(missing_ok=True)
    return aside


def repair(kind: str, key: str, source_dir: str, runs_dir: Path, view: Optional[Path]) -> list[str]:
    """Before a stage: the shared snapshot and the chain's view as queued (snapshot_check.py)."""
    root = code_path(runs_dir, key)

    def rebuild() -> Path:
        top = _repository(source_dir)
        if top is None:
            raise UserError(f"code snapshot {key[:12]} was changed after it was queued and {source_dir} is no "
                            f"longer a git repository to rebuild it from: {QUEUE_AGAIN}")
        content_store.remove_tree(_aside(root))
        return materialize_git(top, key, runs_dir)

    def drop(bad: list[str]) -> None:
        inodes = set()
        for rel in bad:
            try:
                st = (root / rel).lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                inodes.add((st.st_dev, st.st_ino))
        content_store.remove_tree(_aside(root))
        content_store.drop_objects(runs_dir / "code", inodes)  # the next snapshot must not link them

    from opsdctl.identity.snapshot_lock import snapshot_lock

    with snapshot_lock(runs_dir):  # shared: gc waits; the usual case ends here
        if not snapshot_check.damaged(root, snapshot_check.load(root)):
            return snapshot_check.ensure_intact(root, view, None, drop)  # at most the chain's own view to mend
    with snapshot_lock(runs_dir, exclusive=True):  # a repair of shared code: one at a time
        return snapshot_check.ensure_intact(root, view, rebuild if kind == "git" else None, drop)


def gone(kind: str, key: str, source_dir: str, runs_dir: Path) -> Optional[str]:
    """Why the snapshot can no longer be put where its stages run (None: it is there, or git can
    rebuild it): a copy taken outside git that was dropped or deleted, or a git tree whose
    repository is gone."""
    if kind == "live" or code_path(runs_dir, key).is_dir():
        return None
    root = code_path(runs_dir, key)
    if kind != "git":
        return f"code snapshot {root} is gone and cannot be rebuilt (it was a copy, not a git tree)"
    if _repository(source_dir) is None:
        return f"code snapshot {root} is gone and {source_dir} is no longer a git repository"
    return None


def _repository(source_dir: str) -> Optional[Path]:
    return _git_toplevel(Path(source_dir)) if Path(source_dir).is_dir() else None


def ensure_materialized(kind: str, key: str, source_dir: str, runs_dir: Path, prefix: str = "") -> Path:
    """The stage's code dir, re-created from git when someone deleted the copy."""
    if kind == "live":
        return Path(source_dir)
    root = code_path(runs_dir, key)
    if not root.is_dir():
        why = gone(kind, key, source_dir, runs_dir)
        if why is not None:
            raise UserError(f"{why}: {QUEUE_AGAIN}")
        materialize_git(_repository(source_dir), key, runs_dir)
    return root / prefix if prefix else root


# --- outside git: content-addressed copy --------------------------------------------------


def _walk(code_dir: Path, exclude: Sequence[Path], matcher: PathMatcher):
    """Every file and symlink to keep. A symlink (to a directory, or one that loops) is kept as a
    link, never followed: os.walk lists a linked directory among the directories."""
    excluded = {os.path.realpath(p) for p in exclude}

    def kept(p: Path) -> bool:
        rel = p.relative_to(code_dir).as_posix()
        return os.path.realpath(p) not in excluded and not matcher(rel)

    for root, dirs, files in os.walk(code_dir):
        rootp = Path(root)
        links = sorted(d for d in dirs if (rootp / d).is_symlink())
        dirs[:] = sorted(
            d for d in dirs
            if d not in links and d not in SKIP_DIRS and not d.endswith(".egg-info") and kept(rootp / d)
        )
        for name in sorted([*files, *links]):
            p = rootp / name
            if name.endswith(".pyc") or not kept(p):
                continue
            yield p


def _take_copy(code_dir: Path, runs_dir: Path, exclude: Sequence[Path], matcher: PathMatcher) -> tuple[Snapshot, Path]:
    exclude = [*exclude, runs_dir]
    code_root = Path(runs_dir) / "code"
    digest = hashlib.sha256()
    files = []  # (path, rel, sha256 or None for a symlink, executable)
    total = 0
    for p in _walk(code_dir, exclude, matcher):
        rel = p.relative_to(code_dir).as_posix()
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            digest.update(f"L {rel} {os.readlink(p)}\n".encode("utf-8", "surrogateescape"))
            files.append((p, rel, None, False, 0))
        elif stat.S_ISREG(st.st_mode):
            total += st.st_size
            if total > MAX_COPY_BYTES:
                raise UserError(
                    f"code_dir {code_dir}: more than {MAX_COPY_BYTES >> 30} GiB to snapshot outside git; "
                    "make it a git repository, point code_dir at the code only, or set snapshot_code = false"
                )
            h = content_store.file_sha256(p)
            digest.update(f"F {rel} {st.st_mode & 0o111:o} {h}\n".encode("utf-8", "surrogateescape"))
            files.append((p, rel, h, bool(st.st_mode & 0o111), st.st_size))
    key = digest.hexdigest()
    root = code_path(runs_dir, key)
    added: dict[tuple[str, bool], tuple[int, str]] = {}
    if not root.is_dir():
        for _p, rel, h, x, size in files:
            if h is not None and not content_store.has_object(code_root, h, x):
                added.setdefault((h, x), (size, rel))

        def fill(dest: Path) -> None:
            linker = content_store.Linker(code_root)
            for p, rel, h, x, _size in files:
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if h is None:
                    os.symlink(os.readlink(p), target)
                else:
                    linker.place(p, h, x, target)

        _install(root, fill)
    largest = tuple(sorted(((size, shown_name(rel)) for size, rel in added.values()), reverse=True)[:3])
    snap = Snapshot(kind="copy", key=key, source_dir=str(code_dir), dirty=False,
                    added_bytes=sum(size for size, _ in added.values()), largest=largest)
    return snap, root
