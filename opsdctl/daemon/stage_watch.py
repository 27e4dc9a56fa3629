"""Watching one running stage until it ends: its exit, its progress, a cancel from another process,
a stop signal to the worker, its timeout, a policy stop from the gate, and a stall.

`watch` returns None when the stage's process exited on its own (what that means is for its
output to say), else the Outcome it was ended with. Progress comes from
`{stage_dir}/progress.jsonl` (authoritative) and the log's adapters (results.LogProgress) while
that file is silent; each record goes to the gate's on_progress, which may stop the stage.
Each running chain watches its own stage in its own thread.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from opsdctl.contract import results, stage_json
from opsdctl.daemon import procs
from opsdctl.daemon.progress_clock import ProgressClock, stalled
from opsdctl.plan.gate import ChainInfo, Stop
from opsdctl.recipes.profiles import PROFILES
from opsdctl.store.models import Chain, Stage, utcnow
from opsdctl.store.states import Outcome, State

POLL_S = 0.2  # how often a running stage is checked for exit
PROGRESS_S = 0.5  # how often its progress files are read
STATE_CHECK_S = 1.0  # how often the store is asked whether the chain was cancelled
PROGRESS_WRITE_S = 2.0  # how often progress is written to the store (when it changed)
PIDS_S = 2.0  # how often the stage's descendants are listed
REPORT_S = 30.0  # how often the worker prints a running stage's progress (when it changed)
READ_CHUNK = 4 << 20  # the most of a stage's log or progress file read at each look

# A chain moved out of `running` by someone else (`opsdctl cancel`) while its stage ran.
CANCELLED_WHILE_RUNNING = Outcome(State.CANCELLED, "cancelled while running", recorded=True)


@dataclass
class Watch:
    """What one stage's watch has read so far."""

    progress_offset: int = 0
    log_offset: int = 0
    last_progress: Optional[dict] = None
    last_problems_record: Optional[dict] = None
    written_progress: Optional[dict] = None
    pids: set = field(default_factory=set)
    clock: ProgressClock = field(default_factory=ProgressClock)  # for the stall rule
    stall_noted: Optional[str] = None  # the changed_at of the quiet spell already reported


@dataclass(frozen=True)
class Watched:
    """What the watch loop of one running stage looks at."""

    info: ChainInfo
    stage: str
    stage_id: int
    proc: subprocess.Popen
    stage_dir: Path
    log_path: Path
    timeout_min: Optional[float]
    watch: Watch
    started: float  # monotonic
    stop: Callable[[bool], None]  # stop the stage's processes (True: no grace)


def chain_state(store, chain_id: int) -> State:
    with store.read() as s:
        return State(s.get(Chain, chain_id).state)


def watch(ctx, w: Watched) -> Optional[Outcome]:
    info, stage, proc, watch = w.info, w.stage, w.proc, w.watch
    profile = PROFILES.get(info.profile)
    adapter = results.LogProgress(stage, profile.max_steps if profile and stage == "train" else None)
    deadline = w.started + w.timeout_min * 60.0 if w.timeout_min else None
    next_progress = next_state = next_write = next_pids = 0.0
    next_report = w.started + REPORT_S
    reported = None
    while True:
        if proc.poll() is not None:
            read_progress(ctx, info, stage, w.stage_dir, w.log_path, adapter, watch)
            write_progress(ctx.store, w.stage_id, watch)
            return None
        now = time.monotonic()
        if ctx.stop:
            reason = f"worker stopped ({ctx.stop.reason}) during {stage}"
            w.stop(ctx.stop.force)
            return Outcome(State.INTERRUPTED, reason)
        if deadline is not None and now >= deadline:
            w.stop(False)
            return Outcome(State.FAILED, f"{stage} timed out after {w.timeout_min:g} min ([stages.{stage}] timeout_minutes)")
        if now >= next_pids:
            watch.pids.update(procs.descendants(proc.pid))
            ctx.lineages.saw(proc.pid, watch.pids)
            next_pids = now + PIDS_S
        if now >= next_progress:
            stop = read_progress(ctx, info, stage, w.stage_dir, w.log_path, adapter, watch)
            next_progress = now + PROGRESS_S
            note_stall(ctx, info.chain_id, stage, watch)
            if stop is not None:
                w.stop(False)
                return Outcome(stop.state, stop.reason, by_policy=True)
        if now >= next_state:
            next_state = now + STATE_CHECK_S
            if chain_state(ctx.store, info.chain_id) != State.RUNNING:
                w.stop(False)
                return CANCELLED_WHILE_RUNNING
        if now >= next_write:
            write_progress(ctx.store, w.stage_id, watch)
            next_write = now + PROGRESS_WRITE_S
        if now >= next_report:
            next_report = now + REPORT_S
            p = results.progress_from_record(watch.last_progress) if watch.last_progress else None
            text = p.text() if p else "running"
            if text != reported:
                reported = text
                ctx.report(f"chain {info.chain_id}: {stage} {text} ({fmt_s(now - w.started)})")
        ctx.board.heartbeat()
        time.sleep(POLL_S)


def read_progress(ctx, info, stage, stage_dir, log_path, adapter, watch: Watch) -> Optional[Stop]:
    records: list[dict] = []
    pfile = stage_dir / "progress.jsonl"
    if pfile.is_file():
        with open(pfile, "rb") as f:
            f.seek(watch.progress_offset)
            chunk = f.read(READ_CHUNK)
        end = chunk.rfind(b"\n") + 1  # only whole lines; a half-written one waits
        if end == 0 and len(chunk) == READ_CHUNK:
            end = len(chunk)  # a line longer than a whole chunk is no progress record: skip it
        watch.progress_offset += end
        for line in chunk[:end].decode("utf-8", errors="replace").splitlines():
            if len(line) > results.MAX_LINE:
                continue
            try:
                rec = stage_json.loads(line, "progress.jsonl")
            except stage_json.StageJsonError:
                continue
            if isinstance(rec, dict):
                rec.setdefault("source", "progress.jsonl")
                records.append(rec)
    try:
        with open(log_path, "rb") as f:
            f.seek(watch.log_offset)
            chunk = f.read(READ_CHUNK)
        watch.log_offset += len(chunk)
        log_records = adapter.feed(chunk.decode("utf-8", errors="replace"))
    except FileNotFoundError:
        log_records = []
    for rec in records + log_records:
        # progress.jsonl is authoritative; log adapters speak only while it is silent.
        if results.progress_from_record(rec) is not None and (
            rec.get("source") != "log" or not _has_file_progress(watch)
        ):
            watch.last_progress = rec
        if isinstance(rec.get("problems"), list):
            watch.last_problems_record = rec
        try:
            stop = ctx.gate.on_progress(info, stage, rec)
        except Exception as exc:
            ctx.report(f"chain {info.chain_id}: gate.on_progress failed: {exc}")
            stop = None
        if stop is not None:
            return stop
    return None


def write_progress(store, stage_id: int, watch: Watch) -> None:
    if watch.last_progress is None or watch.last_progress == watch.written_progress:
        return
    p = results.progress_from_record(watch.last_progress)
    if p is None:
        return
    p.source = watch.last_progress.get("source", p.source)
    with store.write() as s:
        s.get(Stage, stage_id).progress = {**p.to_dict(), **watch.clock.fields()}
    watch.written_progress = watch.last_progress


def note_stall(ctx, chain_id: int, stage: str, watch: Watch) -> None:
    """Feed the stall clock; say once per quiet spell in the worker log that the stage stalls."""
    now = utcnow()
    watch.clock.observe(watch.last_progress, now)
    fields = watch.clock.fields()
    quiet = stalled(fields, now)
    if quiet is not None and watch.stall_noted != fields["changed_at"]:
        watch.stall_noted = fields["changed_at"]
        ctx.report(f"chain {chain_id}: {stage} stalls: no progress for {fmt_s(quiet['for_s'])} "
                   f"(usually every {fmt_s(quiet['interval_s'])})")


def stage_pids(leader: list[int], watch: Watch) -> set[int]:
    """The stage's own processes now: its leader, their descendants, and every one seen before."""
    if not leader:
        return set()
    return {leader[0]} | watch.pids.copy() | set(procs.descendants(leader[0]))


def _has_file_progress(watch: Watch) -> bool:
    return watch.last_progress is not None and watch.last_progress.get("source") == "progress.jsonl"


def fmt_s(seconds: float) -> str:
    from opsdctl.plan.budget import fmt_duration

    return fmt_duration(seconds)
