"""20 `opsdctl queue` processes at once while a worker runs chains: every chain is recorded,
repeats and seeds stay distinct, and nobody sees "database is locked"."""

from __future__ import annotations


from conftest import default_config, stop_process, wait_for

N = 20


def test_twenty_concurrent_queues_while_a_worker_runs(ws):
    ws.write_config(default_config(snapshot=True))
    ws.run("queue", "baseline")
    worker = ws.popen("worker")
    try:
        wait_for(lambda: ws.sql("select count(*) from stage")[0][0] > 0, 60, what="the worker to start a stage")
        queuers = [ws.popen("queue", "baseline", "--json") for _ in range(N)]
        readers = [ws.popen("status", "--json") for _ in range(3)]
        outputs = []
        for p in queuers + readers:
            out, _ = p.communicate(timeout=180)
            outputs.append((p.returncode, out))
        for rc, out in outputs:
            assert rc == 0, out
            assert "locked" not in out.lower(), out
        rows = ws.sql("select id, repeat, seed, state from chain order by id")
        assert len(rows) == N + 1
        assert sorted(r[1] for r in rows) == list(range(N + 1))  # each repeat exactly once
        assert len({r[2] for r in rows}) == N + 1
        assert ws.sql("select count(*) from variant") == [(1,)]
        assert ws.sql("select count(*) from code_snapshot") == [(1,)]
        busy = ws.sql("select count(*) from chain where state != 'queued'")[0][0]
        assert busy >= 2  # the worker kept claiming and finishing chains meanwhile
    finally:
        stop_process(worker)
    log = worker.stdout.read()
    assert "locked" not in log.lower(), log
    states = dict(ws.sql("select state, count(*) from chain group by state"))
    # a worker stop re-queues the chain it was running as a fresh row (requeued_from): count the originals
    originals = ws.sql("select count(*) from chain where requeued_from is null")[0][0]
    requeued = ws.sql("select count(*) from chain where requeued_from is not null")[0][0]
    assert requeued == states.get("interrupted", 0) <= 1, states
    assert set(states) <= {"succeeded", "queued", "interrupted"} and originals == N + 1, states
    assert states["succeeded"] >= 1
