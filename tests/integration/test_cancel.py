"""opsdctl cancel: queued chains never run; running chains lose their whole process group
(children included, even one that ignores SIGTERM), and nothing else is signalled."""

from __future__ import annotations

import os
import signal

import psutil
from conftest import pid_alive, stage_pids, wait_for




def test_cancel_queued_and_finished(ws):
    ws.cli("queue", "baseline", "--repeats", "2")
    out = ws.run("cancel", "1")
    assert "cancelled" in out.stdout
    assert ws.state(1) == "cancelled"
    assert ws.sql("select reason from chain where id = 1") == [("cancelled by user",)]
    ws.run("worker", "--drain")
    assert ws.state(1) == "cancelled" and ws.state(2) == "succeeded"
    assert ws.sql("select count(*) from stage where chain_id = 1") == [(0,)]  # it never ran
    again = ws.cli("cancel", "2", check=False)
    assert again.returncode == 2 and "already succeeded" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    missing = ws.cli("cancel", "99", check=False)
    assert missing.returncode == 2 and "no such chain" in missing.stderr
    # transitions are recorded, in order
    assert ws.sql("select from_state, to_state from transition where chain_id = 2 order by id") == [
        ("queued", "running"), ("running", "succeeded")]


def test_cancel_running_kills_the_group(ws):
    # The eval hangs; its child ignores SIGTERM, so only the KILL after the 2 s grace ends it.
    bystander = psutil.Popen(["sleep", "60"], start_new_session=True)  # not ours: must survive
    try:
        ws.cli("queue", "baseline", "--repeats", "2")
        worker = ws.popen("worker", "--drain", env={"FAKE_HANG": "1", "FAKE_CHILD": "1", "FAKE_IGNORE_TERM": "1"})
        try:
            leader, child, _ = wait_for(lambda: stage_pids(ws, 1, "eval"), 60, what="the eval stage and its child")
            assert pid_alive(leader) and pid_alive(child)
            assert os.getpgid(child) == leader  # same process group as the stage leader
            out = ws.run("cancel", "1")
            assert "cancelled" in out.stdout and "stopped" in out.stdout
            assert not pid_alive(leader) and not pid_alive(child)
            assert ws.state(1) == "cancelled"
            # the worker records the stage as cancelled and moves on to chain 2 (which hangs too)
            wait_for(lambda: ws.sql("select state from stage where chain_id = 1 and name = 'eval'") == [("cancelled",)],
                     30, what="the worker to record the cancelled stage")
            leader2, child2, _ = wait_for(lambda: stage_pids(ws, 2, "eval"), 60, what="chain 2's eval")
            ws.cli("cancel", "2", "--grace", "0")  # in-process: the same code, no start-up cost
            assert not pid_alive(leader2) and not pid_alive(child2)
            assert worker.wait(timeout=60) == 0, worker.stdout.read()
            log = worker.stdout.read()
        finally:
            if worker.poll() is None:
                worker.kill()
        assert ws.state(1) == "cancelled" and ws.state(2) == "cancelled"
        # the worker log says who ended each running chain, and during which stage
        assert "chain 1: cancelled by user during eval, after" in log, log
        assert "chain 2: cancelled by user during eval" in log, log
        assert bystander.is_running() and bystander.status() != psutil.STATUS_ZOMBIE
        st = ws.chains()
        assert st[1]["reason"] == "cancelled by user" and st[1]["stage"] == "eval"
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait()
