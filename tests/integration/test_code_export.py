"""`opsdctl code CHAIN --to DIR`: a chain's code snapshot written back out, git or copy."""

from __future__ import annotations

import os

from conftest import default_config
from integration.test_snapshot import TRAIN, git


def _files(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and not {"runs", ".git", "__pycache__", "recipes"} & set(p.relative_to(root).parts)
            and not p.name.startswith("runs.db") and p.name != "opsdctl.toml"}  # never snapshotted


def _setup(ws, use_git: bool):
    (ws.root / "version.py").write_text('VERSION = "queued"\n')
    (ws.root / "pkg").mkdir()
    (ws.root / "pkg" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(ws.root / "pkg" / "run.sh", 0o755)
    ws.write_config(default_config(train=TRAIN, snapshot=True))
    if use_git:
        (ws.root / ".gitignore").write_text("runs/\nruns.db*\n")
        git(ws.root, "init", "-q")
        git(ws.root, "add", "-A")
        git(ws.root, "commit", "-q", "-m", "start")
    before = _files(ws.root)
    ws.cli("queue", "baseline", "--repeats", "1")
    (ws.root / "version.py").write_text('VERSION = "edited later"\n')
    ws.cli("worker", "--drain")
    return before


def test_code_round_trip_git_and_copy(ws, tmp_path):
    for use_git in (True, False):
        if use_git is False:  # a fresh workspace outside git
            import shutil

            shutil.rmtree(ws.root / ".git")
            ws.cli("queue", "baseline", "--repeats", "1")  # snapshot of the edited code, as a copy
            ws.cli("worker", "--drain")
            expected = _files(ws.root)
            expected.pop(".gitignore", None)
            chain = 2
        else:
            expected = _setup(ws, True)
            chain = 1
        dest = tmp_path / f"out-{use_git}"
        doc = ws.cli_json("code", str(chain), "--to", str(dest), "--json")
        assert doc["kind"] == ("git" if use_git else "copy") and doc["chain_id"] == chain
        got = _files(dest)
        got.pop(".gitignore", None)
        expected.pop(".gitignore", None)
        assert got == expected
        assert os.access(dest / "version.py", os.W_OK)  # the user's own copy: writable
        assert os.stat(dest / "pkg" / "run.sh").st_mode & 0o100  # executables stay executable


def test_code_refuses_non_empty_dir_and_unknown_chain(ws, tmp_path):
    _setup(ws, True)
    dest = tmp_path / "busy"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine\n")
    r = ws.cli("code", "1", "--to", str(dest), check=False)
    assert r.returncode == 2 and "not empty" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in dest.iterdir()) == ["keep.txt"]  # nothing written
    r = ws.cli("code", "99", "--to", str(tmp_path / "new"), check=False)
    assert r.returncode == 2 and "no such chain" in r.stderr
    assert not (tmp_path / "new").exists()
    r = ws.cli("code", str(2**70), "--to", str(tmp_path / "new"), check=False)
    assert r.returncode == 2 and "CHAIN_ID" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = ws.cli("code", "1", "--to", str(tmp_path / "no" / "such" / "parent"), check=False)
    assert r.returncode == 2 and "parent directory" in r.stderr
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_code_of_a_live_chain_says_why(ws, tmp_path):
    ws.write_config(default_config(snapshot=False))
    ws.cli("queue", "baseline", "--repeats", "1")
    ws.cli("worker", "--drain")
    r = ws.cli("code", "1", "--to", str(tmp_path / "x"), check=False)
    assert r.returncode == 2 and "snapshot_code = false" in r.stderr
