"""[notify]: every event kind reaches the hook once, a SIGKILLed worker's undelivered events are
delivered once by the next worker, a hook that hangs or fails is stopped and logged, values
reach the shell quoted, and bad settings are one-line errors. (The outbox's migration is tested
in test_store_migrations.py.)"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import default_config, stop_process, wait_for

HOOK = "printf '%s\\n' {json} >> events.jsonl"


def notify_config(extra_sections: str = "", budget_minutes: float = 0) -> str:
    return default_config(extra='extra_method_knobs = ["fake_mode"]', budget="hours = 6") + (
        f'\n[notify]\ncommand = "{HOOK}"\nbudget_minutes = {budget_minutes}\n' + extra_sections)


def events(ws) -> list[dict]:
    path = ws.root / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def kinds(ws, kind: str) -> list[dict]:
    return [e for e in events(ws) if e["event"] == kind]


def test_every_event_kind_fires_once(ws):
    ws.write_config(notify_config('[export]\npath = "submission/recipe.env"\nminutes_before_deadline = 100000\n',
                                  budget_minutes=100000))
    for mode in ("fail", "hang"):
        ws.recipe(mode, f'name = "{mode}"\nextends = "baseline"\n[method]\nfake_mode = "{mode}"\n')
    ws.cli("queue", "baseline")
    ws.cli("queue", "token-clip")
    ws.cli("queue", "fail")
    ws.cli("queue", "hang")
    # what the notifier saw last time: token-clip was `better`; its first run here changes that
    con = sqlite3.connect(ws.db)
    con.execute("insert into meta (key, value) values ('notify_verdicts', ?)",
                (json.dumps({"token-clip": {"verdict": "better", "n": 5}}),))
    con.commit()
    con.close()
    worker = ws.popen("worker", "--drain", env={"FAKE_STEPS": "5", "FAKE_STEP_SECONDS": "0.4"})  # steps the worker sees one by one
    try:
        wait_for(lambda: kinds(ws, "stage.stalled"), timeout=90, what="the hung train stage reported stalled")
        ws.cli("cancel", "4")
        assert worker.wait(timeout=90) == 0, worker.stdout.read()
    finally:
        stop_process(worker)
    got = events(ws)
    assert len({e["event_id"] for e in got}) == len(got), "an event was delivered twice"
    ends = sorted((e["chain_id"], e["event"]) for e in got if e["event"].startswith("chain."))
    assert ends == [(1, "chain.succeeded"), (2, "chain.succeeded"), (3, "chain.failed"), (4, "chain.cancelled")]
    (stall,) = kinds(ws, "stage.stalled")
    assert (stall["chain_id"], stall["variant"], stall["detail"]["stage"]) == (4, "hang", "train")
    assert len(kinds(ws, "budget.nearly_spent")) == 1
    assert kinds(ws, "export.written") and all(e["detail"]["path"].endswith("recipe.env") for e in kinds(ws, "export.written"))
    (verdict,) = kinds(ws, "verdict.changed")
    assert verdict["detail"]["candidate"] == "token-clip" and verdict["detail"]["was"] == "better"
    succeeded = next(e for e in got if e["event"] == "chain.succeeded")
    assert succeeded["message"].startswith("opsdctl: chain 1 baseline succeeded (score ")
    # every row of the outbox is marked delivered, without an error
    assert ws.sql("select count(*) from outbox where sent_at is null or error is not null") == [(0,)]


def test_sigkilled_workers_pending_events_fire_once_after_restart(ws):
    ws.write_config(notify_config(budget_minutes=100000))
    ws.cli("queue", "baseline", "-n", "2")
    first = ws.popen("worker", env={"FAKE_HANG_AT": "2", "FAKE_STEPS": "4"})
    try:
        wait_for(lambda: kinds(ws, "budget.nearly_spent") and ws.sql(
            "select state from stage where chain_id = 1 and name = 'train'") == [("running",)],
            timeout=60, what="the first worker delivered an event and hangs in chain 1")
        first.send_signal(signal.SIGSTOP)  # frozen: what happens now stays in the outbox
        # a subprocess: should the frozen worker hold the store's write lock, the cancel waits for the kill
        cancel = ws.popen("cancel", "2")
        time.sleep(1.0)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
        assert cancel.wait(timeout=120) == 0, cancel.stdout.read()
    finally:
        stop_process(first)
    # chain 2's cancel waits in the outbox (under load the hung stage may also have been seen stalled)
    unsent = sorted(k for (k,) in ws.sql("select kind from outbox where sent_at is null"))
    assert unsent.count("chain.cancelled") == 1 and set(unsent) <= {"chain.cancelled", "stage.stalled"}, unsent
    second = ws.popen("worker", "--drain", env={"FAKE_STEPS": "2"})
    try:
        assert second.wait(timeout=180) == 0, second.stdout.read()
    finally:
        stop_process(second)
    got = events(ws)
    assert len({e["event_id"] for e in got}) == len(got), "an event was delivered twice"
    ends = [(e["event"], e["chain_id"]) for e in got if e["event"] != "stage.stalled"]
    assert sorted(ends, key=str) == sorted([("budget.nearly_spent", None), ("chain.cancelled", 2),
                                            ("chain.interrupted", 1), ("chain.succeeded", 3)], key=str)


# --- the hooks themselves, on a store's outbox ---------------------------------------------------


def _notifier(ws, notify: str):
    from opsdctl.config import load_config
    from opsdctl.daemon.notify import Notifier
    from opsdctl.store.engine import open_store

    ws.write_config(default_config() + "\n[notify]\n" + notify)
    cfg = load_config(ws.root / "opsdctl.toml")
    store = open_store(cfg.db)
    said: list[str] = []
    return Notifier(cfg, store, said.append, budget=lambda: None), store, said


def _event(store, key: str, reason: str = "out of memory") -> None:
    from opsdctl.store import outbox

    with store.write() as s:
        outbox.record(s, outbox.EventKind.CHAIN_FAILED, key, {"chain_id": 7, "state": "failed", "reason": reason})


def test_a_hanging_or_failing_hook_is_stopped_logged_and_not_retried(ws):
    hang, store, said = _notifier(ws, 'command = "sleep 30"\ntimeout_seconds = 0.5\n')
    _event(store, "e1")
    t = time.monotonic()
    assert hang.drain() == 1
    assert time.monotonic() - t < 10
    assert said == ["notify: chain.failed (e1-1): command timed out after 0.5 s; killed"]
    assert ws.sql("select error is not null, sent_at is not null from outbox") == [(1, 1)]
    assert hang.drain() == 0  # given up, not retried

    fail, store, said = _notifier(ws, 'command = "echo no route to chat >&2; exit 3"\n')
    _event(store, "e2")
    fail.drain()
    assert said == ["notify: chain.failed (e2-2): command exited 3: no route to chat"]


def test_values_reach_the_shell_quoted(ws):
    n, store, said = _notifier(ws, "command = \"printf '%s\\\\n' {message} {event} >> out.txt\"\n")
    evil = "$(touch pwned); `touch pwned2` 'it''s' \"x\" | cat"
    _event(store, "e1", reason=evil)
    n.drain()
    assert said == []
    assert (ws.root / "out.txt").read_text().splitlines() == [f"opsdctl: chain 7 failed: {evil}", "chain.failed"]
    assert not (ws.root / "pwned").exists() and not (ws.root / "pwned2").exists()


class _Hook(BaseHTTPRequestHandler):
    bodies: list = []
    delay = 0.0

    def do_POST(self):
        time.sleep(self.delay)
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def hook_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hook.bodies, _Hook.delay = [], 0.0
    yield server
    server.shutdown()


def test_webhook_gets_a_chat_message_and_a_slow_one_times_out(ws, hook_server, monkeypatch):
    url = f"http://127.0.0.1:{hook_server.server_port}/hooks/secret-path"
    monkeypatch.setenv("OPSDCTL_TEST_WEBHOOK", url)
    n, store, said = _notifier(ws, 'webhook_env = "OPSDCTL_TEST_WEBHOOK"\ntimeout_seconds = 1\n')
    _event(store, "e1")
    n.drain()
    (body,) = _Hook.bodies
    assert body["text"] == body["content"] == "opsdctl: chain 7 failed: out of memory"
    assert (body["event"], body["event_id"]) == ("chain.failed", "e1-1")
    _Hook.delay = 3.0
    _event(store, "e2")
    n.drain()
    assert said == ["notify: chain.failed (e2-2): webhook failed: TimeoutError (timed out)"]
    assert "secret-path" not in " ".join(said)  # the URL may hold a token: never logged


def test_bad_notify_settings_are_one_line_errors(ws):
    for body, words in (('command = "x {chain}"', "unknown placeholder {chain}"),
                        ('webhook = "ftp://hooks.example/abc123"', "must be an http:// or https:// URL"),
                        ('events = ["chain.exploded"]', "unknown event 'chain.exploded'")):
        ws.write_config(default_config() + "\n[notify]\n" + body + "\n")
        out = ws.cli("status", check=False)
        assert out.returncode == 2 and words in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "abc123" not in out.stderr


def test_a_hook_never_sees_the_stores_credentials_or_the_webhook_url(ws, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "s3cret-pw")
    monkeypatch.setenv("OPSDCTL_TEST_WEBHOOK", "http://127.0.0.1:9/hooks/secret-path")
    monkeypatch.setenv("OPSDCTL_TEST_KEPT", "kept")
    n, store, said = _notifier(ws, 'command = "env > env.txt"\nwebhook_env = "OPSDCTL_TEST_WEBHOOK"\ntimeout_seconds = 2\n')
    _event(store, "e1")
    n.drain()
    env = (ws.root / "env.txt").read_text()
    assert "OPSDCTL_TEST_KEPT=kept" in env
    assert "s3cret-pw" not in env and "secret-path" not in env

