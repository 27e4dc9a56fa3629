"""Each stage runs on code nobody else's stage could alter. Chains of one snapshot each run in their
own view of it; a stage that writes into its code in place (chmod, then write, as the files'
owner or root can) or adds a file to the shared snapshot changes nothing another chain runs: the
worker finds the change before the next stage and rebuilds a git snapshot, or drops a copy taken
outside git (the chain fails in one line, the next queue takes a clean copy). The recipe written at
recipe_env_path never goes through a symlinked directory to outside the chain's code. Real CLI,
real worker, real git, real subprocess stages, real SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import FAKE_TRAIN, default_config

TAMPER = """\
import os, pathlib
if os.environ["OPSDCTL_CHAIN_ID"] == "1":
    os.chmod("version.py", 0o644)
    with open("version.py", "w") as f:  # in place: the inode every view of the snapshot shares
        f.write('VERSION = "tampered"\\n')
    shared = next(p for p in (pathlib.Path(os.environ["OPSDCTL_RUN_DIR"]).parent / "code").iterdir()
                  if p.is_dir() and p.name != "objects")
    os.chmod(shared, 0o755)
    (shared / "sneaky.py").write_text("X = 1\\n")
"""
TRAIN = ("{python} -c \"import version; print('VERSION', version.VERSION)\" && {python} tamper.py && "
         f"{sys.executable} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}")


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}).stdout


def _code(ws, use_git: bool) -> None:
    ws.write_config(default_config(train=TRAIN, snapshot=True))
    (ws.root / "version.py").write_text('VERSION = "queued"\n')
    (ws.root / "tamper.py").write_text(TAMPER)
    if use_git:
        (ws.root / ".gitignore").write_text("runs/\nruns.db*\n")
        git(ws.root, "init", "-q")
        git(ws.root, "add", "-A")
        git(ws.root, "commit", "-q", "-m", "code")


def _version(ws, chain_id: int) -> str:
    return next(l for l in (ws.runs / str(chain_id) / "train.log").read_text().splitlines() if l.startswith("VERSION"))


def test_a_stage_that_alters_shared_git_code_alters_it_for_nobody(ws):
    _code(ws, use_git=True)
    ws.cli("queue", "baseline", "--repeats", "2")  # two chains, one snapshot
    out = ws.run("worker", "--drain").stdout
    assert ws.state(1) == ws.state(2) == "succeeded", out
    assert _version(ws, 1) == "VERSION queued" and _version(ws, 2) == "VERSION queued"
    assert "was changed after it was queued" in out and "rebuilt from git" in out
    key = ws.sql("select key from code_snapshot")[0][0]
    shared = ws.runs / "code" / key
    assert (shared / "version.py").read_text() == 'VERSION = "queued"\n' and not (shared / "sneaky.py").exists()
    assert not (ws.runs / "2" / "code" / "sneaky.py").exists()
    assert not os.access(shared / "version.py", os.W_OK) or os.geteuid() == 0  # sealed read-only
    assert oct((shared / "version.py").stat().st_mode & 0o222) == "0o0"


def test_a_stage_that_alters_a_shared_copy_fails_in_one_line_and_the_next_queue_is_clean(ws):
    _code(ws, use_git=False)
    ws.cli("queue", "baseline", "--repeats", "2")
    ws.run("worker", "--drain")
    assert ws.state(1) == ws.state(2) == "failed"  # neither runs the altered code
    reasons = {c["chain_id"]: c["reason"] for c in ws.status()["chains"]}
    assert "changed after it was queued" in reasons[1] and "queue the variant again (`opsdctl queue NAME`" in reasons[1]
    assert ws.sql("select count(*) from stage where chain_id = 2") == [(0,)]  # chain 2 never started
    assert "is gone and cannot be rebuilt" in reasons[2] and "queue the variant again" in reasons[2]
    # a re-queue would run the dropped snapshot again: refused, with the line that queues it afresh
    seed = ws.sql("select seed from chain where id = 1")[0][0]
    r = ws.cli("requeue", "1", check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "is gone and cannot be rebuilt" in r.stderr and f"`opsdctl queue baseline --seed {seed} --same-seed`" in r.stderr
    assert ws.sql("select count(*) from chain") == [(2,)]  # nothing queued
    # what it says works: chain 3 at that seed, on a fresh copy of the same code (not the altered file objects)
    ws.cli(*f"queue baseline --seed {seed} --same-seed".split())
    key = ws.sql("select s.key from chain c join code_snapshot s on s.id = c.snapshot_id where c.id = 3")[0][0]
    assert ws.sql("select seed from chain where id = 3") == [(seed,)] and (ws.runs / "code" / key).is_dir()
    (ws.root / "tamper.py").write_text("")
    ws.write_config(default_config(train=TRAIN.replace("tamper.py", "-c pass"), snapshot=True))
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    assert ws.state(4) == "succeeded" and _version(ws, 4) == "VERSION queued"


@pytest.mark.parametrize("inside", [False, True], ids=["link-outside", "link-inside"])
def test_recipe_env_path_never_writes_through_a_symlink_to_outside(ws, tmp_path, inside):
    cfg = default_config(snapshot=True).replace("[stages.train]\n", '[stages.train]\nrecipe_env_path = "submission/recipe.env"\n')
    ws.write_config(cfg)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "recipe.env").write_text("mine=1\n")
    if inside:
        (ws.root / "real").mkdir()
        (ws.root / "real" / "recipe.env").write_text("mine=1\n")
        (ws.root / "real" / "notes.txt").write_text("kept\n")
        os.symlink("real", ws.root / "submission")
    else:
        os.symlink(outside, ws.root / "submission")
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    assert (outside / "recipe.env").read_text() == "mine=1\n"  # never touched
    if inside:
        assert ws.state(1) == "succeeded"
        assert (ws.root / "real" / "recipe.env").read_text() == "mine=1\n"
        assert "learning_rate" not in (ws.runs / "1" / "code" / "real").joinpath("notes.txt").read_text()
    else:
        assert ws.state(1) == "failed"
        reason = ws.status()["chains"][0]["reason"]
        assert "recipe_env_path" in reason and "leads outside" in reason
