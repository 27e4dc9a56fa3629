"""Status and queue details of a session: the running chain's projected end
and stall notice in the status table, the worker log naming a user's cancel, and queue's warning
for a chain that cannot fit in the time left. Real worker subprocesses, real SQLite."""

from __future__ import annotations

from conftest import stop_process, wait_for


def test_status_shows_projected_end_and_a_stalled_stage(ws):
    ws.cli("queue", "baseline")
    # four steps 0.5 s apart, then the script hangs after step 4
    worker = ws.popen("worker", "--drain", env={"FAKE_STEPS": "8", "FAKE_STEP_SECONDS": "0.5", "FAKE_HANG_AT": "4"})
    try:
        running = wait_for(lambda: next((c for c in ws.status()["chains"] if c["state"] == "running"
                                         and c.get("stalled")), None), 60, interval=0.5, what="a stalled stage")
        assert running["stage"] == "train" and running["progress"]["text"] == "step 4/8"
        assert running["stalled"]["for_s"] >= 3.0 and 0.3 <= running["stalled"]["interval_s"] <= 1.5
        assert running["projected_end_in_s"] is not None and running["projected_end_in_s"] > 0
        table = ws.cli("status").stdout
        assert "ends" in table and "stalled: no progress for" in table and "(usually every" in table
        row = next(line for line in table.splitlines() if line.lstrip().startswith("1 "))
        assert "+" in row and ":" in row  # "+1m00s (14:05)": the projected end, with the clock time
        ws.cli("cancel", "1", "--grace", "0")
        assert worker.wait(timeout=60) == 0
        log = worker.stdout.read()
    finally:
        if worker.poll() is None:
            stop_process(worker)
    assert "chain 1: train stalls: no progress for" in log, log
    assert "chain 1: cancelled by user during train" in log, log


def test_a_progressing_stage_is_not_stalled(ws):
    ws.cli("queue", "baseline")
    out = ws.run("worker", "--drain", env={"FAKE_STEPS": "12", "FAKE_STEP_SECONDS": "0.3"})
    assert ws.state(1) == "succeeded" and "stalls" not in out.stdout, out.stdout
    progress = ws.status()["chains"][0]["stages"][0]["progress"]
    assert progress["text"] == "step 12/12" and progress["fraction"] == 1.0


def _budget(ws, seconds: int) -> None:
    text = (ws.root / "opsdctl.toml").read_text()
    text = text.replace("[budget]\n", '[budget]\nremaining_file = "remaining"\nmargin_minutes = 0\n', 1)
    ws.write_config(text + "\n[planner]\ntrain_minutes = 3\neval_minutes = 3\n")
    (ws.root / "remaining").write_text(f"{seconds}\n")


def test_queue_warns_when_the_chain_cannot_fit_but_queues_it(ws):
    _budget(ws, 600)  # 10 min left; a chain needs ~6 min
    first = ws.run("queue", "baseline")
    assert "cannot fit" not in first.stderr
    second = ws.run("queue", "token-clip", "--json")  # behind the baseline: 6 + 6 > 10 min
    assert second.returncode == 0
    assert "chain 2 token-clip cannot fit in the time left (needs ~6 min, " in second.stderr, second.stderr
    assert "queued anyway" in second.stderr
    assert ws.state(2) == "queued"
    assert [c["chain_id"] for c in __import__("json").loads(second.stdout)] == [2]  # --json stays clean


def test_queue_does_not_warn_without_a_budget(ws):
    out = ws.run("queue", "baseline", "--repeats", "3")
    assert "cannot fit" not in out.stderr
