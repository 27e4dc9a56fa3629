"""`opsdctl worker` on a host too small for its chains: one line, exit 2, nothing run or written."""

from __future__ import annotations


def test_worker_refuses_a_layout_the_host_cannot_hold(ws):
    ws.write_config()
    ws.run("queue", "baseline")
    before = ws.counts()
    config = ws.root / "opsdctl.toml"
    config.write_text(config.read_text() + '\n[host]\nram_gib_per_chain = 100000\ncpus_per_chain = 1\n')
    res = ws.run("worker", "--drain", check=False)
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "[host]: 1 chain at once needs 100000 GiB of RAM" in err
    assert ws.counts() == before and ws.sql("select state from chain") == [("queued",)]
