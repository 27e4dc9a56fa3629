"""`opsdctl wait`: blocks until the named chains (or all) end, prints their
outcome, exits 1 if any failed, 124 on --timeout; follows a chain re-queued after its worker
died. Real worker and wait subprocesses, real SQLite."""

from __future__ import annotations

import json
import signal

from conftest import default_config, stop_process, wait_for


def _with_broken_recipe(ws):
    ws.write_config(default_config(extra='extra_method_knobs = ["fake_mode"]'))
    ws.recipe("broken", 'extends = "baseline"\n[method]\nfake_mode = "fail"\n')


def test_wait_for_chains_while_the_worker_runs(ws):
    _with_broken_recipe(ws)
    ws.cli("queue", "baseline", "broken")
    every = ws.popen("wait", "--all", "--json")  # waiting before any worker runs
    worker = ws.popen("worker", "--drain", env={"FAKE_STEP_SECONDS": "0.2"})
    try:
        one = ws.run("wait", "1", check=False)
        assert one.returncode == 0, one.stdout + one.stderr
        assert "chain 1 baseline seed 0: succeeded, avg@4 = " in one.stdout and "all 1 ended well" in one.stdout
        out, _ = every.communicate(timeout=60)
        assert every.returncode == 1, out  # chain 2 failed
        assert "no worker is running" not in out  # a worker starting up is not a missing one
        doc = json.loads(out[out.index("{"):])
        assert doc["ok"] is False and doc["timed_out"] is False
        assert [(c["chain_id"], c["state"]) for c in doc["chains"]] == [(1, "succeeded"), (2, "failed")]
        assert doc["chains"][0]["score"] is not None and doc["chains"][0]["k"] == 4
        both = ws.run("wait", "1", "2", check=False)  # both ended already: answers at once
        assert both.returncode == 1 and "chain 2 broken seed 0: failed: train exited with code 3" in both.stdout
        assert "1 of 2 did not succeed" in both.stdout
        assert worker.wait(timeout=60) == 0
    finally:
        for p in (worker, every):
            if p.poll() is None:
                stop_process(p)
    # nothing left to wait for: returns at once
    idle = ws.cli("wait", "--all")
    assert idle.returncode == 0 and "nothing queued or running" in idle.stdout


def test_wait_times_out_and_leaves_the_chain_running(ws):
    ws.cli("queue", "baseline")
    worker = ws.popen("worker", "--drain", env={"FAKE_HANG": "1"})
    try:
        wait_for(lambda: ws.state(1) == "running", 60, what="chain 1 to start")
        res = ws.run("wait", "1", "--timeout", "0.05", "--json", check=False)
        assert res.returncode == 124
        doc = json.loads(res.stdout)
        assert doc["timed_out"] and not doc["ok"] and doc["chains"][0]["state"] == "running"
        assert doc["waited_seconds"] >= 3.0
        assert ws.state(1) == "running"
        ws.cli("cancel", "1", "--grace", "0")
    finally:
        stop_process(worker)


def test_wait_without_a_worker_says_so(ws):
    ws.cli("queue", "baseline")
    res = ws.cli("wait", "--all", "--timeout", "0.12", check=False)  # the warning comes after 5 s without one
    assert res.returncode == 124
    assert "no worker is running on this store" in " ".join(res.stderr.split())
    assert "timed out" in res.stdout and ws.state(1) == "queued"


def test_bad_wait_arguments_are_refused(ws):
    ws.cli("queue", "baseline")
    for args, words in ((("wait",), "name the chains"), (("wait", "1", "--all"), "not both"),
                        (("wait", "99"), "chain 99 does not exist")):
        res = ws.cli(*args, check=False)
        assert res.returncode == 2 and words in res.stderr, (args, res.stderr)


def test_wait_follows_a_chain_requeued_after_its_worker_died(ws):
    ws.cli("queue", "baseline")
    first = ws.popen("worker", env={"FAKE_STEPS": "50", "FAKE_STEP_SECONDS": "0.5"})
    waiter = None
    try:
        wait_for(lambda: ws.sql("select count(*) from stage where chain_id = 1 and pid is not null")[0][0] == 1,
                 60, what="chain 1's train stage")
        waiter = ws.popen("wait", "1", "--json")
        first.send_signal(signal.SIGKILL)  # the worker dies; its chain stays `running`
        first.wait(timeout=30)
        ws.run("worker", "--drain")  # recovery: chain 1 interrupted, re-queued as chain 2, which runs
        out, _ = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, out
        doc = json.loads(out[out.index("{"):])
        (c,) = doc["chains"]
        assert c["chain_id"] == 1 and c["final_chain_id"] == 2 and c["state"] == "succeeded" and doc["ok"]
    finally:
        for p in (first, waiter):
            if p is not None and p.poll() is None:
                p.kill()
