"""`[notify]`: tell a person or an agent when something happens, instead of making them poll.

    [notify]
    command = "notify-send opsdctl {message}"       # placeholders shell-quoted, as in stages
    webhook_env = "OPSDCTL_WEBHOOK"                  # or webhook = "https://..." (Slack, Mattermost, Discord...)

Events live in the store's outbox (opsdctl.store.outbox), each written in the transaction of the
change it reports: a chain's end by opsdctl.store.states.transition, an auto-export by
opsdctl.daemon.auto_export, and the ones nothing else records (a stage stalled, a verdict changed,
the budget nearly spent) by this notifier's own look at the store, under keys that name the event
so a second look adds nothing. A thread of the worker delivers the undelivered rows in order and
marks each one sent, so a worker that is SIGKILLed leaves its pending events to the next worker.
The one window left: a worker killed between a hook's end and that mark re-sends that one event
at the next start; `{event_id}` (and `event_id` in the webhook's JSON) lets a receiver drop it.

A hook gets `timeout_seconds`; one that hangs is killed (its whole process group), one that fails
is logged with its exit code and the end of its stderr, and neither is retried or stops the worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, Optional

from opsdctl.config import Config
from opsdctl.plan.budget import CLOCK_KEY, BudgetView, fmt_duration
from opsdctl.daemon.progress_clock import STORE_LAG_S, stalled
from opsdctl.store import credentials, queries
from opsdctl.store.engine import Store, get_meta, running_stages, set_meta
from opsdctl.store.models import Chain, Outbox, Variant, utcnow
from opsdctl.store.outbox import EventKind, mark_sent, pending, record
from opsdctl.templates import render
from opsdctl.store.open_read import open_reader

VERDICTS_KEY = "notify_verdicts"  # Meta: {candidate: verdict} as the notifier last saw them
STDERR_TAIL = 400  # bytes of a failing hook's stderr kept for the log line


@dataclass(frozen=True)
class Event:
    """One outbox row, with what its receivers need to read it without the store."""

    row_id: int  # the outbox row
    event_id: str  # the same on a re-send: "<key>-<row id>"
    kind: str
    chain_id: Optional[int]
    variant: str
    state: str
    message: str
    payload: dict

    def to_json(self) -> dict:
        return {"event_id": self.event_id, "event": self.kind, "chain_id": self.chain_id, "variant": self.variant,
                "state": self.state, "message": self.message, "detail": self.payload}


def describe(kind: str, payload: dict, variant: str) -> str:
    """The event in one line, for a chat message or a desktop notification."""
    who = " ".join(x for x in ("chain", str(payload.get("chain_id")), variant) if x)
    if kind.startswith("chain."):
        why = f": {payload['reason']}" if payload.get("reason") else ""
        score = f" (score {payload['score']:.2f})" if payload.get("score") is not None else ""
        return f"opsdctl: {who} {payload.get('state')}{score}{why}"
    if kind == EventKind.STAGE_STALLED.value:
        return (f"opsdctl: {who}: its {payload.get('stage')} stage has made no progress for "
                f"{fmt_duration(payload.get('for_s') or 0)} (usually every {fmt_duration(payload.get('interval_s') or 0)})")
    if kind == EventKind.VERDICT_CHANGED.value:
        return (f"opsdctl: {payload.get('candidate')} is now {payload.get('verdict') or 'without a verdict'} "
                f"(was {payload.get('was') or 'none'}; {payload.get('n')} runs)")
    if kind == EventKind.EXPORT_WRITTEN.value:
        return f"opsdctl: wrote {payload.get('path')} <- {payload.get('leader')} ({payload.get('verdict') or 'released recipe'})"
    if kind == EventKind.BUDGET_NEARLY_SPENT.value:
        return f"opsdctl: budget nearly spent: {payload.get('text')}"
    return f"opsdctl: {kind}"


class Notifier:
    """Looks for the events only it can see (`look`), delivers the outbox (`drain`); a thread
    repeats both while the worker runs."""

    def __init__(self, cfg: Config, store: Store, report: Callable[[str], None], budget: Callable[[], BudgetView],
                 every_s: float = 1.0):
        sec = cfg.section("notify")
        self.cfg, self.store, self.report, self.budget = cfg, store, report, budget
        self.command: Optional[str] = sec.get("command")
        self.webhook_env: Optional[str] = sec.get("webhook_env")
        self.webhook: Optional[str] = sec.get("webhook")
        self.events = set(sec["events"]) if sec.get("events") is not None else None
        self.timeout_s = float(sec.get("timeout_seconds", 10.0))
        self.budget_s = 60.0 * float(sec.get("budget_minutes", 30.0))
        self.every_s = every_s
        self._scored = -1  # scored runs when the verdicts were last looked at
        self._recorded: set[str] = set()  # keys this notifier has recorded (the store keeps them too)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # looking ---------------------------------------------------------------------------------

    def look(self) -> None:
        self._look_stalls()
        self._look_budget()
        self._look_verdicts()

    def _look_stalls(self) -> None:
        now = utcnow()
        with self.store.read() as s:
            stages = running_stages(s)
        for st in stages:
            stall = stalled(st.progress, now, STORE_LAG_S)
            if stall is None:
                continue
            key = f"stalled:{st.id}:{st.progress.get('changed_at')}"
            if key in self._recorded:
                continue
            with self.store.write() as s:
                record(s, EventKind.STAGE_STALLED, key, {"chain_id": st.chain_id, "stage": st.name, "state": "running",
                                                         **stall})
            self._recorded.add(key)

    def _look_budget(self) -> None:
        view = self.budget()
        left = view.usable_seconds
        if left is None or left > self.budget_s:
            return
        b = self.cfg.budget
        # one event per budget: the clock's start (hours) or the configured deadline / file
        which = open_reader(self.store).get_meta(CLOCK_KEY) if b.kind == "hours" else str(b.deadline or b.remaining_file)
        key = f"budget:{b.kind}:{which}"
        if key in self._recorded:
            return  # no write lock taken every second for an event already recorded
        with self.store.write() as s:
            record(s, EventKind.BUDGET_NEARLY_SPENT, key, {"usable_seconds": round(max(left, 0.0), 1), "text": view.text()})
        self._recorded.add(key)

    def _look_verdicts(self) -> None:
        reader = open_reader(self.store)
        scored = int(reader.value(queries.SCORE_COUNT) or 0)
        if scored == self._scored:
            return  # verdicts move only with new scores
        self._scored = scored  # set first: a report that fails is said once per new score, not every second
        from opsdctl.plan.store_report import store_report

        report = store_report(self.cfg, reader)
        now = {e.name: {"verdict": e.verdict, "n": e.n} for e in report.full}
        with self.store.write() as s:
            seen_text = get_meta(s, VERDICTS_KEY)
            seen = json.loads(seen_text) if seen_text else {}
            if seen_text is not None:  # the first look only learns where things stand
                for name, e in now.items():
                    was = (seen.get(name) or {}).get("verdict")
                    if e["verdict"] == was or (was is None and e["verdict"] in (None, "undecided")):
                        continue
                    record(s, EventKind.VERDICT_CHANGED, f"verdict:{name}:{e['n']}:{e['verdict']}",
                           {"candidate": name, "verdict": e["verdict"], "was": was, "n": e["n"]})
            set_meta(s, VERDICTS_KEY, json.dumps({**seen, **now}, sort_keys=True))  # a candidate not shown now keeps its memory

    # delivering ------------------------------------------------------------------------------

    def drain(self) -> int:
        """Deliver every undelivered event, oldest first; return how many hooks ran."""
        with self.store.read() as s:
            rows = [self._event(s, row) for row in pending(s)]
        fired = 0
        for event in rows:
            error = None
            if self._wanted(event):
                error = self._deliver(event)
                fired += 1
            with self.store.write() as s:
                mark_sent(s, event.row_id, error)
        return fired

    def _event(self, s, row: Outbox) -> Event:
        p = dict(row.payload or {})
        chain_id = p.get("chain_id")
        variant, state = "", p.get("state") or ""
        if chain_id is not None:
            chain = s.get(Chain, chain_id)
            if chain is not None:
                variant = s.get(Variant, chain.variant_id).label
                if row.kind == EventKind.CHAIN_SUCCEEDED.value:
                    from opsdctl.store.engine import score_of

                    sc = score_of(s, chain_id)
                    p["score"] = None if sc is None else round(sc.avg_at_k, 4)
        return Event(row.id, f"{row.key}-{row.id}", row.kind, chain_id, variant, state,
                     describe(row.kind, p, variant), p)

    def _wanted(self, event: Event) -> bool:
        """A hook is configured and the event is one of [notify] events (all by default)."""
        hooked = bool(self.command or self.webhook or self.webhook_env)
        return hooked and (self.events is None or event.kind in self.events)

    def _deliver(self, event: Event) -> Optional[str]:
        """Run the hooks for one event; None when they worked, else what went wrong (logged)."""
        errors = []
        if self.command:
            errors.append(self._run_command(event))
        url = self.webhook or (os.environ.get(self.webhook_env) if self.webhook_env else None)
        if self.webhook_env and not url:
            errors.append(f"webhook: ${self.webhook_env} is not set in the worker's environment")
        elif url:
            errors.append(self._post(url, event))
        error = "; ".join(e for e in errors if e) or None
        if error:
            self.report(f"notify: {event.kind} ({event.event_id}): {error}")
        return error

    def _run_command(self, event: Event) -> Optional[str]:
        values = {"event": event.kind, "event_id": event.event_id, "chain_id": event.chain_id or "",
                  "variant": event.variant, "state": event.state, "message": event.message,
                  "json": json.dumps(event.to_json(), default=str)}
        cmd = render(self.command, values)
        # stdout is dropped and stderr goes to a file: a chatty hook can neither block nor bloat us
        with tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(cmd, shell=True, cwd=self.cfg.base_dir, env=self._hook_env(),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)
            except OSError as exc:
                return f"command did not start: {exc}"
            try:
                code = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                return f"command timed out after {self.timeout_s:g} s; killed"
            if code == 0:
                return None
            err.seek(max(0, err.seek(0, 2) - STDERR_TAIL))
            tail = err.read().decode("utf-8", errors="replace").strip().replace("\n", " | ")
            return f"command exited {code}" + (f": {tail}" if tail else "")

    def _hook_env(self) -> dict[str, str]:
        """The worker's environment without the store's credentials (as a stage's) or the webhook's
        URL: a hook is a command like a stage's, and may be someone else's script."""
        env = credentials.scrub_env(os.environ, self.cfg.db)
        env.pop(self.webhook_env or "", None)
        return env

    def _post(self, url: str, event: Event) -> Optional[str]:
        # `text` for Slack / Mattermost / Rocket.Chat, `content` for Discord; the rest for scripts
        body = json.dumps({"text": event.message, "content": event.message, **event.to_json()}, default=str).encode()
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "opsdctl"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                resp.read(1024)
            return None
        except urllib.error.HTTPError as exc:  # the URL may hold a secret: never print it
            return f"webhook answered HTTP {exc.code}"
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            return f"webhook failed: {type(reason).__name__}" + (" (timed out)" if "timed out" in str(reason) else "")

    # the thread ------------------------------------------------------------------------------

    def step(self) -> None:
        try:
            self.look()
        except Exception as exc:  # never take the worker down over a notification; say why, go on
            self.report(f"notify: look failed: {type(exc).__name__}: {exc}")
        try:
            self.drain()
        except Exception as exc:
            self.report(f"notify: delivery failed: {type(exc).__name__}: {exc}")

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self.every_s)

    def start(self) -> "Notifier":
        self._thread = threading.Thread(target=self._run, name="opsdctl-notify", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread, then deliver what the worker's last moves recorded."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s * 2 + 30)
        self.step()


def start_notifier(cfg: Config, store: Store, report: Callable[[str], None],
                   budget: Callable[[], BudgetView]) -> Notifier:
    """The worker's notifier, started. Without [notify] it still marks the outbox delivered, so
    hooks configured later do not replay old events."""
    every = min(2.0, max(0.2, float(cfg.poll_seconds)))
    return Notifier(cfg, store, report, budget, every).start()
