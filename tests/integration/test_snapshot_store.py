"""Snapshots outside git store each file content once (hard links), warn
when one stores a lot, and `opsdctl gc` removes what no live chain needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import FAKE_TRAIN, default_config

TRAIN = (
    "{python} -c \"import version; print('VERSION', version.VERSION)\" && "
    f"{sys.executable} {FAKE_TRAIN} --seed {{seed}} --output-dir {{stage_dir}}"
)
BIG = 3 << 20


def _setup(ws, warn_mib: float = 1):
    (ws.root / "version.py").write_text('VERSION = "one"\n')
    (ws.root / "ckpt").mkdir()
    (ws.root / "ckpt" / "big.bin").write_bytes(os.urandom(BIG))
    ws.write_config(default_config(train=TRAIN, snapshot=True, extra=f"snapshot_warn_mib = {warn_mib}"))


def _unique_bytes(root) -> int:
    seen, total = set(), 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def test_copy_snapshots_share_unchanged_files_and_warn_on_size(ws):
    _setup(ws)
    first = ws.run("queue", "baseline")
    assert "warning" in first.stderr and "ckpt/big.bin 3 MiB" in first.stderr, first.stderr
    (ws.root / "version.py").write_text('VERSION = "two"\n')
    second = ws.run("queue", "token-clip")
    assert "warning" not in second.stderr, second.stderr  # only version.py was new
    keys = [k for (k,) in ws.sql("select key from code_snapshot order by id")]
    assert len(keys) == 2
    a, b = (ws.runs / "code" / k / "ckpt" / "big.bin" for k in keys)
    assert os.stat(a).st_ino == os.stat(b).st_ino  # one copy of the content
    assert _unique_bytes(ws.runs / "code") < BIG + (64 << 10)
    ws.run("worker", "--drain")
    assert "VERSION one" in (ws.runs / "1" / "train.log").read_text()
    assert "VERSION two" in (ws.runs / "2" / "train.log").read_text()
    assert [s for (s,) in ws.sql("select state from chain order by id")] == ["succeeded", "succeeded"]


def test_gc_removes_only_what_no_live_chain_needs(ws):
    _setup(ws, warn_mib=0)
    ws.cli("queue", "baseline")
    ws.cli("queue", "token-clip")
    ws.run("worker", "--drain")
    (ws.root / "version.py").write_text('VERSION = "two"\n')
    ws.cli("queue", "cosine")  # live: its snapshot (which also holds big.bin) must stay
    old_key, new_key = (k for (k,) in ws.sql("select key from code_snapshot order by id"))
    before = ws.cli_json("show", "baseline")

    dry = ws.cli_json("gc", "--dry-run")
    assert dry["dry_run"] is True
    paths = {i["path"]: i["kind"] for i in dry["items"]}
    assert paths[str(ws.runs / "code" / old_key)] == "snapshot"
    for chain in (1, 2):
        assert paths[str(ws.runs / str(chain) / "train")] == "stage-output"
        assert paths[str(ws.runs / str(chain) / "eval")] == "stage-output"
    assert str(ws.runs / "code" / new_key) not in paths and not any("/3/" in p for p in paths)
    objects = [i for i in dry["items"] if i["kind"] == "object"]
    assert len(objects) == 1 and objects[0]["bytes"] < 1024  # the old version.py; big.bin is still used
    assert all(os.path.exists(p) for p in paths)  # a dry run removes nothing

    text = ws.cli("gc").stdout
    assert "freed" in text
    assert not (ws.runs / "code" / old_key).exists() and not (ws.runs / "1" / "train").exists()
    assert (ws.runs / "1" / "train.log").is_file()  # logs stay
    assert ws.cli_json("show", "baseline") == before  # the store is untouched
    ws.run("worker", "--drain")
    assert ws.state(3) == "succeeded" and "VERSION two" in (ws.runs / "3" / "train.log").read_text()

    after = ws.cli_json("gc")
    assert str(ws.runs / "code" / new_key) in {i["path"] for i in after["items"]}
    assert after["freed_bytes"] >= BIG  # the last snapshot holding big.bin went, and its object with it
    assert _unique_bytes(ws.runs / "code") == 0
    assert ws.cli_json("gc")["items"] == []


def test_gc_keep_and_git_snapshot_rebuilt_on_requeue(ws):
    (ws.root / "version.py").write_text('VERSION = "git"\n')
    ws.write_config(default_config(train=TRAIN, snapshot=True))
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    subprocess.run(["git", "init", "-q"], cwd=ws.root, check=True, env=env)
    ws.cli("queue", "baseline", "token-clip")
    ws.run("worker", "--drain")
    (key,) = {k for (k,) in ws.sql("select key from code_snapshot")}
    report = ws.cli_json("gc", "--keep", "baseline")
    gone = {i["path"] for i in report["items"]}
    assert str(ws.runs / "code" / key) in gone and str(ws.runs / "2" / "train") in gone
    assert (ws.runs / "1" / "train").is_dir()  # --keep baseline
    bad = ws.cli("gc", "--keep", "nope", check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    # a git snapshot comes back from its commit when a chain needs it again
    ws.cli("requeue", "2")
    ws.run("worker", "--drain")
    assert ws.state(3) == "succeeded" and "VERSION git" in (ws.runs / "3" / "train.log").read_text()
    assert json.loads(json.dumps(report))["dry_run"] is False
