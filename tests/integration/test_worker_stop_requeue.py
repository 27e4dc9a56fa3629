"""A chain interrupted by the worker's SIGTERM (Ctrl-C) is re-queued as after a SIGKILL: finished
work is salvaged (a trained chain resumes at its eval) and the next worker runs it. Before, it
stayed `interrupted` with no hint, while a SIGKILLed worker's chain was re-queued."""

from __future__ import annotations

import signal

from conftest import wait_for


def test_sigterm_during_eval_requeues_the_eval_like_sigkill(ws):
    ws.cli("queue", "baseline")
    worker = ws.popen("worker", env={"FAKE_HANG": "1"})  # the eval hangs
    try:
        wait_for(lambda: ws.sql("select pid from stage where chain_id = 1 and name = 'eval' and pid is not null"),
                 timeout=60, what="the eval stage")
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    rows = ws.sql("select id, state, eval_only, trained_by from chain order by id")
    assert rows == [(1, "interrupted", 0, None), (2, "queued", 1, 1)], rows
    assert "re-queued as chain 2" in out and "without training again" in out, out
    ws.cli("worker", "--drain")
    assert ws.state(2) == "succeeded"
    assert ws.sql("select name from stage where chain_id = 2") == [("eval",)]  # not trained again
