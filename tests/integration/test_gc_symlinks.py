"""`opsdctl gc` never deletes outside runs_dir: a `runs/<id>` replaced by a symlink (to another
user's or another project's run dir) is not followed, and a stage output that is a symlink is
unlinked, its target kept. Real worker, real SQLite store."""

from __future__ import annotations

import os
import shutil


def _outside(tmp_path, name):
    target = tmp_path / name
    for stage in ("train", "eval"):
        (target / stage).mkdir(parents=True)
        (target / stage / "precious.bin").write_bytes(b"x" * 100)
    return target


def test_gc_never_follows_a_symlinked_run_dir(ws, tmp_path):
    ws.cli("queue", "baseline", "--repeats", "2")
    ws.run("worker", "--drain")
    assert ws.state(1) == ws.state(2) == "succeeded"

    # runs/1 becomes a symlink to somebody else's directory; runs/2/train a symlink to another
    victim = _outside(tmp_path, "victim")
    shutil.rmtree(ws.runs / "1")
    os.symlink(victim, ws.runs / "1")
    other = _outside(tmp_path, "other")
    shutil.rmtree(ws.runs / "2" / "train")
    os.symlink(other / "train", ws.runs / "2" / "train")

    dry = ws.cli_json("gc", "--dry-run")
    assert not any(i["path"].startswith(str(ws.runs / "1")) for i in dry["items"])
    ws.cli("gc")
    for stage in ("train", "eval"):
        assert (victim / stage / "precious.bin").is_file()  # nothing outside runs_dir is touched
    assert (other / "train" / "precious.bin").is_file()
    assert not os.path.lexists(ws.runs / "2" / "train")  # the link itself went
    assert not (ws.runs / "2" / "eval").exists() and (ws.runs / "2" / "train.log").is_file()
