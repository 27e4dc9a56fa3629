"""Code snapshots: a chain runs the code as it was when it was queued, never later edits."""

from __future__ import annotations

import subprocess
import sys

from conftest import FAKE_TRAIN, default_config

TRAIN = (
    "{python} -c \"import version; print('VERSION', version.VERSION)\" && "
    f"{sys.executable} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}"
)


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}).stdout


def _status(ws) -> list[str]:
    """git status without opsdctl's own files (runs/, runs.db*), which this repo does not ignore."""
    return [l for l in git(ws.root, "status", "--porcelain").splitlines() if not l.startswith("?? runs")]


def _setup_code(ws):
    (ws.root / "version.py").write_text('VERSION = "queued"\n')
    ws.write_config(default_config(train=TRAIN, snapshot=True))


def test_git_snapshot_isolation(ws):
    _setup_code(ws)
    (ws.root / ".gitignore").write_text("*.secret\n")
    git(ws.root, "init", "-q")
    git(ws.root, "add", "-A")
    git(ws.root, "commit", "-q", "-m", "start")
    (ws.root / "version.py").write_text('VERSION = "uncommitted"\n')  # dirty, not staged
    (ws.root / "untracked.txt").write_text("new file\n")  # untracked, not ignored: included
    (ws.root / "key.secret").write_text("ignored\n")  # ignored: excluded
    git(ws.root, "add", "untracked.txt")  # the user's staging area must stay exactly as it is
    before = _status(ws)

    ws.run("queue", "baseline")
    ws.cli("queue", "token-clip")  # same code: same snapshot
    assert _status(ws) == before
    (ws.root / "version.py").write_text('VERSION = "edited after queueing"\n')
    ws.run("worker", "--drain")

    for chain in (1, 2):
        log = (ws.runs / str(chain) / "train.log").read_text()
        assert "VERSION uncommitted" in log, log
    kind, key, head, dirty, diffstat, path = ws.sql(
        "select kind, key, head, dirty, diffstat, path from code_snapshot")[0]
    assert ws.sql("select count(*) from code_snapshot") == [(1,)]
    assert kind == "git" and dirty == 1 and head == git(ws.root, "rev-parse", "HEAD").strip()
    assert "version.py" in diffstat and "untracked.txt" in diffstat
    code = ws.runs / "code" / key
    assert path == str(code)
    assert (code / "untracked.txt").is_file() and not (code / "key.secret").exists()
    assert not (code / "runs").exists() and not (code / "runs.db").exists()
    # each chain runs in its own view of the snapshot: its files are the snapshot's (hard links)
    assert ws.sql("select distinct cwd from stage order by cwd") == [(str(ws.runs / "1" / "code"),), (str(ws.runs / "2" / "code"),)]
    assert (ws.runs / "1" / "code" / "version.py").stat().st_ino == (code / "version.py").stat().st_ino
    # the snapshot commit is kept alive under refs/opsdctl/ and holds exactly that tree
    commit = git(ws.root, "rev-parse", f"refs/opsdctl/snapshots/{key}").strip()
    assert git(ws.root, "rev-parse", f"{commit}^{{tree}}").strip() == key
    assert git(ws.root, "show", f"{commit}:version.py") == 'VERSION = "uncommitted"\n'

    # a new queue after the edit gets the new code
    ws.cli("queue", "baseline", "--repeats", "1")
    ws.cli("worker", "--drain")
    assert "VERSION edited after queueing" in (ws.runs / "3" / "train.log").read_text()
    assert ws.sql("select count(*) from code_snapshot") == [(2,)]


def test_copy_snapshot_outside_git(ws):
    _setup_code(ws)
    assert subprocess.run(["git", "rev-parse"], cwd=ws.root, capture_output=True).returncode != 0
    ws.cli("queue", "baseline")
    (ws.root / "version.py").write_text('VERSION = "edited"\n')
    ws.run("worker", "--drain")
    assert "VERSION queued" in (ws.runs / "1" / "train.log").read_text()
    kind, key, path = ws.sql("select kind, key, path from code_snapshot")[0]
    assert kind == "copy" and path == str(ws.runs / "code" / key)
    assert not (ws.runs / "code" / key / "runs").exists()
    assert not (ws.runs / "code" / key / "runs.db").exists()


def test_snapshot_off_runs_live_code(ws):
    (ws.root / "version.py").write_text('VERSION = "queued"\n')
    ws.write_config(default_config(train=TRAIN, snapshot=False))
    ws.cli("queue", "baseline")
    (ws.root / "version.py").write_text('VERSION = "live"\n')
    ws.cli("worker", "--drain")
    assert "VERSION live" in (ws.runs / "1" / "train.log").read_text()
    assert ws.sql("select kind from code_snapshot") == [("live",)]
