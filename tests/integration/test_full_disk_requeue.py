"""A disk that someone else fills mid-chain (the stage's own files are not what filled it, so
stopping the stage frees nothing): the chain becomes `interrupted` and is re-queued at once, as
the README says, and the worker stops with one line. Before, the re-queue could not be written and
the chain stayed `running` until the next worker start. Runs in a private mount namespace (a
small tmpfs), so the disk is really full."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, clean_env, default_config, opsdctl_argv


def _namespaces_work() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt 2>/dev/null || "
                            "mount -t tmpfs -o size=1m tmpfs /tmp"], capture_output=True)
    return probe.returncode == 0


# Another user's process: once the chain's train stage has started, it fills the disk with a file
# nobody can see (unlinked, held open) and keeps it until it is killed.
FILLER = textwrap.dedent("""\
    import os, sys, time
    disk, trigger = sys.argv[1], sys.argv[2]
    while not os.path.exists(trigger):
        time.sleep(0.05)
    f = open(os.path.join(disk, "someone-elses"), "wb")
    os.unlink(f.name)
    try:
        while True:
            f.write(b"0" * 65536)
            f.flush()
    except OSError:
        pass
    open(os.path.join(sys.argv[3], "full"), "w").close()
    time.sleep(600)
""")


@pytest.mark.skipif(not _namespaces_work(), reason="needs unshare -rm (user + mount namespaces)")
def test_a_disk_filled_by_someone_else_requeues_the_chain_at_once(tmp_path):
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir(), out.mkdir()
    (tmp_path / "filler.py").write_text(FILLER)
    (tmp_path / "opsdctl.toml.in").write_text(default_config())
    script = textwrap.dedent(f"""\
        mount -t tmpfs -o size=32m tmpfs {disk}
        cp -r {REPO / 'recipes'} {disk}/recipes
        cp {tmp_path / 'opsdctl.toml.in'} {disk}/opsdctl.toml
        cd {disk}
        $OPSDCTL queue baseline --repeats 2 > {out}/queue.txt
        $PY {tmp_path / 'filler.py'} {disk} {disk}/runs/1/train {out} &
        filler=$!
        rc=0; FAKE_STEPS=600 FAKE_STEP_SECONDS=0.05 $OPSDCTL worker --drain > {out}/worker.out 2> {out}/worker.err || rc=$?
        echo $rc > {out}/worker.rc
        ls {out}/full > /dev/null
        kill $filler; wait $filler || true
        $OPSDCTL status --json > {out}/status.json
    """)
    env = clean_env({"OPSDCTL": " ".join(opsdctl_argv()), "PY": sys.executable})
    res = subprocess.run(["unshare", "-rm", "sh", "-euc", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    err, worker_out = (out / "worker.err").read_text(), (out / "worker.out").read_text()
    assert (out / "worker.rc").read_text().strip() == "2", worker_out + err
    assert "Traceback" not in err + worker_out and len(err.strip().splitlines()) == 1, err
    assert "re-queued as chain 3" in err, err
    chains = {c["chain_id"]: c for c in json.loads((out / "status.json").read_text())["chains"]}
    assert chains[1]["state"] == "interrupted", chains[1]
    assert chains[2]["state"] == "queued" and chains[3]["state"] == "queued"  # re-queued; the other untouched
    assert all(st["state"] != "running" for st in chains[1]["stages"])
