"""Issue 14, item 1: in a normal git workspace opsdctl's own files (the store, its WAL/SHM and
lock files, the runs dir) never enter a code snapshot, whatever the user's .gitignore says."""

from __future__ import annotations

import subprocess

import pytest
from conftest import default_config, opsdctl_argv, clean_env

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=GIT_ENV).stdout


def _tree_paths(ws, key: str) -> list[str]:
    return git(ws.root, "ls-tree", "-r", "--name-only", key).split()


@pytest.mark.parametrize("ignore", ["runs.db\n", "runs/\n", "runs.db*\nruns/\n", "/runs\n*.db\n*.lock\n"])
def test_queue_twice_with_own_files_ignored(ws, ignore):
    """`git init; echo runs.db > .gitignore; opsdctl init; opsdctl queue baseline` failed at once;
    with only runs/ ignored, the second queue failed."""
    ws.write_config(default_config(snapshot=True))
    git(ws.root, "init", "-q")
    (ws.root / ".gitignore").write_text(ignore)
    (ws.root / "train.py").write_text("print('hi')\n")
    ws.run("queue", "baseline")
    ws.run("queue", "token-clip")  # runs/ and runs.db (+ -wal/-shm) exist now
    ws.run("worker", "--drain")
    assert [s for (s,) in ws.sql("select state from chain order by id")] == ["succeeded", "succeeded"]
    (key,) = {k for (k,) in ws.sql("select key from code_snapshot")}
    paths = _tree_paths(ws, key)
    assert "train.py" in paths and "opsdctl.toml" in paths
    assert not [p for p in paths if p.startswith("runs")], paths


def test_init_then_queue_in_a_fresh_repository(tmp_path):
    """The issue's reproduction, command for command (`opsdctl init` writes the config)."""
    root = tmp_path / "w"
    root.mkdir()
    git(root, "init", "-q")
    (root / ".gitignore").write_text("runs.db\n")
    env = clean_env()
    for args in (["init"], ["queue", "baseline"], ["queue", "baseline"]):
        proc = subprocess.run([*opsdctl_argv(), *args], cwd=root, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)


def test_tracked_store_file_is_left_out(ws):
    """A runs.db committed by mistake (and runs/ not ignored at all) stays out of the snapshot;
    the user's own index is untouched."""
    ws.write_config(default_config(snapshot=True))
    git(ws.root, "init", "-q")
    ws.run("queue", "baseline")  # creates runs.db and runs/
    git(ws.root, "add", "-f", "runs.db", "opsdctl.toml")
    git(ws.root, "commit", "-q", "-m", "oops")
    staged = git(ws.root, "ls-files", "--stage")
    ws.run("queue", "token-clip")
    assert git(ws.root, "ls-files", "--stage") == staged
    key = ws.sql("select key from code_snapshot order by id desc")[0][0]
    paths = _tree_paths(ws, key)
    assert "opsdctl.toml" in paths and not [p for p in paths if p.startswith("runs")], paths
