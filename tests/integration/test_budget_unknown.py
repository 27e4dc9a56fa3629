"""An unknown budget is never "unlimited".

A `remaining_file` that is missing, empty mid-rewrite, unparsable, non-finite or absurd must
neither crash `status`, `budget` and the worker, nor let the worker run chains blind: it keeps
the last deadline it read, and with none it holds and says why in `status`.
"""

from __future__ import annotations

import sys
import time

from conftest import FAKE_TRAIN, default_config, stop_process, wait_for
from support.countdown import BAD_VALUES


def _budget_config(ws, train: str | None = None):
    ws.write_config(default_config(budget='remaining_file = ".timer/remaining_secs"\nmargin_minutes = 1',
                                   **({"train": train} if train else {})))
    return ws.root / ".timer" / "remaining_secs"


def test_status_and_budget_survive_every_bad_value(ws):
    f = _budget_config(ws)
    ws.cli("queue", "baseline")
    for text in BAD_VALUES:
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(text.encode("latin-1"))
        doc = ws.cli_json("budget")
        assert doc["seconds_left"] is None and doc["text"].startswith("unknown"), (text, doc)
        status = ws.cli_json("status")
        assert status["budget"]["hold"].startswith("budget unknown"), status["budget"]
    f.write_text("nan\n")
    res = ws.run("status")  # the console script too: no traceback
    assert "unknown" in res.stdout and "holding" in res.stdout and "Traceback" not in res.stderr


def test_config_warns_at_load_about_a_missing_remaining_file(ws):
    _budget_config(ws)
    res = ws.run("queue", "baseline")
    assert "remaining_file" in res.stderr and "does not exist" in res.stderr and "warning" in res.stderr


def test_worker_holds_until_the_budget_can_be_read(ws):
    f = _budget_config(ws)
    ws.cli("queue", "baseline")
    worker = ws.popen("worker", "--drain")
    try:
        wait_for(lambda: (ws.cli_json("status")["worker"].get("activity") or "").startswith("holding"),
                 timeout=60, what="the worker to hold")
        status = ws.cli("status").stdout
        assert "holding" in status and "is missing" in status and "no chain starts" in status
        time.sleep(1.0)
        assert ws.state(1) == "queued" and ws.sql("select count(*) from stage") == [(0,)]  # nothing ran blind
        f.parent.mkdir(exist_ok=True)
        f.write_text("36000\n")
        out, _ = worker.communicate(timeout=90)
    finally:
        if worker.poll() is None:
            stop_process(worker)
    assert worker.returncode == 0, out
    assert ws.state(1) == "succeeded" and "holding" in out


def test_a_countdown_gone_bad_mid_chain_keeps_the_last_deadline(ws):
    """The file turns to `nan` while the chain trains. Today the eval check crashes the worker
    and leaves the trained chain interrupted; now the eval runs on the last deadline read."""
    train = (f"echo nan > {ws.root / '.timer' / 'remaining_secs'} && "
             f"{sys.executable} {FAKE_TRAIN} --recipe {{recipe_json}} --seed {{seed}} --output-dir {{stage_dir}}")
    f = _budget_config(ws, train=train)
    f.parent.mkdir()
    f.write_text("36000\n")
    ws.cli("queue", "baseline", "--repeats", "2")
    res = ws.run("worker", "--drain", check=False)
    assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    assert [ws.state(1), ws.state(2)] == ["succeeded", "succeeded"]
    assert "keeping the last deadline read" in res.stdout
    doc = ws.cli_json("budget")
    assert doc["seconds_left"] is None and "not a plausible number" in doc["error"]  # no worker now: unknown
