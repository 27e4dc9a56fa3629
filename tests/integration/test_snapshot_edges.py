"""Code snapshots meet odd workspaces with one line, never a traceback: file names that are not
UTF-8 (git and not), a symlink loop, a symlink to a directory (kept as a link outside git), an
unknown database driver. The countdown's temporary siblings (`.timer/remaining_secs.tmp`) and the
`[snapshot] exclude` globs never enter a snapshot, so a timer tick cannot split a candidate's code
identity. Real CLI, real worker, real git, real SQLite store."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import default_config


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}).stdout


def _key(ws, chain_id: int) -> str:
    return ws.sql("select s.key from chain c join code_snapshot s on s.id = c.snapshot_id where c.id = ?", chain_id)[0][0]


def _odd_tree(root):
    with open(os.path.join(os.fsencode(root), b"bad\xff.py"), "w") as f:
        f.write("X = 1\n")
    os.symlink("loop", root / "loop")
    (root / "data").mkdir()
    (root / "data" / "table.txt").write_text("rows\n")
    os.symlink("data", root / "linked")


@pytest.mark.parametrize("use_git", [False, True], ids=["copy", "git"])
def test_odd_file_names_and_symlinks_snapshot_without_a_traceback(ws, use_git):
    ws.write_config(default_config(snapshot=True))
    _odd_tree(ws.root)
    if use_git:
        (ws.root / ".gitignore").write_text("runs/\nruns.db*\n")
        git(ws.root, "init", "-q")
        git(ws.root, "add", "-A")
        git(ws.root, "commit", "-q", "-m", "odd")
    queued = ws.cli("queue", "baseline")
    assert "Traceback" not in queued.stderr
    worker = ws.run("worker", "--drain")
    assert ws.state(1) == "succeeded", worker.stdout + worker.stderr
    snap = ws.runs / "code" / _key(ws, 1)
    assert os.path.exists(os.path.join(os.fsencode(snap), b"bad\xff.py"))
    assert os.path.islink(snap / "linked") and os.readlink(snap / "linked") == "data"  # a link, not left out
    assert os.path.islink(snap / "loop")
    assert ws.cli_json("show", "baseline")["runs"][0]["chain_id"] == 1


def test_an_unknown_database_driver_is_one_line(ws):
    ws.write_config(default_config().replace('"sqlite:///runs.db"', '"postgresql+nodriver://u@h/db"'))
    proc = ws.cli("status", check=False)
    assert proc.returncode == 2 and "nodriver" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("use_git", [False, True], ids=["copy", "git"])
def test_countdown_siblings_and_exclude_globs_stay_out_of_snapshots(ws, use_git):
    extra = '\n[snapshot]\nexclude = ["*.ckpt", "outputs/"]\n'
    ws.write_config(default_config(snapshot=True, budget='remaining_file = ".timer/remaining_secs"') + extra)
    timer = ws.root / ".timer"
    timer.mkdir()
    (timer / "remaining_secs").write_text("21600\n")
    (ws.root / "method.py").write_text("CLIP = 'entry'\n")
    (ws.root / "big.ckpt").write_text("weights 1")
    if use_git:
        (ws.root / ".gitignore").write_text("runs/\nruns.db*\n")
        git(ws.root, "init", "-q")
        git(ws.root, "add", "-A")  # even a committed checkpoint stays out
        git(ws.root, "commit", "-q", "-m", "code")
    ws.cli("queue", "baseline")
    # the countdown ticks by rewriting atomically; a run writes outputs and checkpoints into code_dir
    (timer / "remaining_secs.tmp").write_text("21599\n")
    (timer / "elapsed_secs").write_text("1\n")
    (ws.root / "outputs").mkdir()
    (ws.root / "outputs" / "log.txt").write_text("step 1\n")
    (ws.root / "big.ckpt").write_text("weights 2")
    ws.cli("queue", "baseline")
    assert _key(ws, 1) == _key(ws, 2)  # one code identity
    snap = ws.runs / "code" / _key(ws, 1)
    assert (snap / "method.py").is_file()
    assert not (snap / ".timer").exists() and not (snap / "outputs").exists() and not (snap / "big.ckpt").exists()
    (ws.root / "method.py").write_text("CLIP = 'token, keeping its direction'\n")
    ws.cli("queue", "baseline")
    assert _key(ws, 3) != _key(ws, 1)  # a real code change still counts


def test_the_countdown_at_the_top_of_code_dir_and_a_bad_glob(ws):
    ws.write_config(default_config(snapshot=True, budget='remaining_file = "remaining_secs"'))
    (ws.root / "remaining_secs").write_text("100\n")
    ws.cli("queue", "baseline")
    (ws.root / "remaining_secs.tmp").write_text("99\n")
    ws.cli("queue", "baseline")
    assert _key(ws, 1) == _key(ws, 2)
    ws.write_config(default_config(snapshot=True) + '\n[snapshot]\nexclude = ["/"]\n')
    proc = ws.cli("queue", "baseline", check=False)
    assert proc.returncode == 2 and "[snapshot] exclude" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
