"""Run one chain's stages on this machine: the `local` executor.

`LocalExecutor.run_chain(chain_id)` is the whole life of a claimed (`running`) chain: prepare
its run dir, then for each stage ask the gate for GPUs, render the command, start it in its own
process group, watch it (exit, progress, cancel from another process, a stop signal to the
worker, a timeout, a policy stop), clean up its leftover processes, ingest its result, and move
the chain to its end state with one guarded transition. Another executor (Ray) runs
the same stages elsewhere by implementing `run_chain` and `stop`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from opsdctl.config import Config
from opsdctl.errors import UserError, one_line
from opsdctl.fsutil import atomic_write_json, atomic_write_text, read_tail
from opsdctl.plan.gate import ChainInfo, Gate, Grant, Skip, Stop, Wait, chain_info
from opsdctl.recipes import knobs
from opsdctl.recipes.load import recipe_json
from opsdctl.recipes.profiles import PROFILES
from opsdctl.contract import eval_request, log_metrics, results, stage_json
from opsdctl.daemon import frozen_stages, gpu_sampler, procs, recipe_file, stages, subreaper
from opsdctl.identity import code_view
from opsdctl.daemon.command_hint import failure_hint
from opsdctl.contract.effective_config import MISMATCH, RecipeCheck, check_log
from opsdctl.daemon.env_errors import environment_problem
from opsdctl.daemon.requeue_on_error import environment_stop, requeue_after_error
from opsdctl.daemon.progress_clock import ProgressClock, stalled
from opsdctl.contract.score_row import score_row as _score_row
from opsdctl.identity.snapshot import ensure_materialized
from opsdctl.identity.snapshot import repair as repair_snapshot
from opsdctl.store.engine import Store, snapshot_of
from opsdctl.store.models import (
    Chain,
    Score,
    Stage,
    TrainStats,
    Variant,
    WorkerRun,
    utcnow,
)
from opsdctl.store.states import Outcome, State, transition

POLL_S = 0.2  # how often a running stage is checked for exit
NO_GO_EXIT_S = 5.0  # how long an eval held for its go may take to exit on its own at end of file
PROGRESS_S = 0.5  # how often its progress files are read
STATE_CHECK_S = 1.0  # how often the store is asked whether the chain was cancelled
PROGRESS_WRITE_S = 2.0  # how often progress is written to the store (when it changed)
HEARTBEAT_S = 10.0
REPORT_S = 30.0  # how often the worker prints a running stage's progress (when it changed)
READ_CHUNK = 4 << 20  # the most of a stage's log or progress file read at each look


class StopRequest:
    """Set by the worker's signal handler; read by the running stage's watch loop."""

    def __init__(self):
        self.reason: Optional[str] = None
        self.force = False

    def set(self, reason: str) -> None:
        if self.reason is not None:
            self.force = True  # a second signal: do not wait for the grace period
        else:
            self.reason = reason

    def __bool__(self) -> bool:
        return self.reason is not None


@dataclass(frozen=True)
class _Launch:
    stage: str
    command: str
    env: dict
    token: str
    values: dict
    stage_dir: Path
    log_path: Path

    def same_run(self, other: "_Launch") -> bool:
        """Would start the same thing (the token and the go pipe aside)."""
        own = {stages.ENV_STAGE_TOKEN, stages.ENV_GO_FD}
        strip = lambda env: {k: v for k, v in env.items() if k not in own}  # noqa: E731
        return (self.stage, self.command, self.stage_dir, self.log_path) == (
            other.stage, other.command, other.stage_dir, other.log_path) and strip(self.env) == strip(other.env)


@dataclass
class _Prestarted:
    """An eval started while its train stage runs, holding until the go (eval/hold.py)."""

    launch: _Launch
    proc: subprocess.Popen
    go_fd: int  # our end of its go pipe: one byte = go; closing it = no go
    ident: procs.StageIdentity
    started: float  # monotonic


@dataclass(frozen=True)
class _Watched:
    """What the watch loop of one running stage looks at."""

    info: ChainInfo
    stage: str
    stage_id: int
    proc: subprocess.Popen
    ident: procs.StageIdentity
    stage_dir: Path
    log_path: Path
    timeout_min: Optional[float]
    watch: "_Watch"
    started: float  # monotonic


# A chain moved out of `running` by someone else (`opsdctl cancel`) while its stage ran.
CANCELLED_WHILE_RUNNING = Outcome(State.CANCELLED, "cancelled while running", recorded=True)


@dataclass
class _Watch:
    progress_offset: int = 0
    log_offset: int = 0
    last_progress: Optional[dict] = None
    last_problems_record: Optional[dict] = None
    written_progress: Optional[dict] = None
    pids: set = field(default_factory=set)
    clock: ProgressClock = field(default_factory=ProgressClock)  # for the stall rule
    stall_noted: Optional[str] = None  # the changed_at of the quiet spell already reported


def run_dir_of(cfg: Config, chain_id: int) -> Path:
    return cfg.runs_dir / str(chain_id)


class LocalExecutor:
    def __init__(
        self,
        cfg: Config,
        store: Store,
        gate: Gate,
        stop: StopRequest,
        report: Callable[[str], None] = lambda msg: None,
        worker_run_id: Optional[int] = None,
    ):
        self.cfg = cfg
        self.store = store
        self.gate = gate
        self.stop_request = stop
        self.report = report
        self.worker_run_id = worker_run_id
        self.host = socket.gethostname()
        self._last_heartbeat = 0.0
        self._live: Optional[procs.StageIdentity] = None  # the stage process group running now
        self._settings: Optional[frozen_stages.StageSettings] = None  # the running chain's stage settings
        self._recipe: Optional[recipe_file.Installed] = None  # a recipe.env put at recipe_env_path, to undo
        self._stages_left: list[str] = []  # the running chain's stages after the current one
        self._prestarted: Optional[_Prestarted] = None  # its eval, started while training runs
        self._snap = None  # the running chain's code snapshot row (None: live code)
        subreaper.become()  # a stage's orphans become ours to stop (subreaper.py)
        self._children_before: set[int] = set()  # this process's children before the running stage

    # --- the chain ------------------------------------------------------------------------

    def run_chain(self, chain_id: int) -> State:
        """Run a claimed chain to its end state and return it."""
        with self.store.read() as s:
            chain = s.get(Chain, chain_id)
            variant = s.get(Variant, chain.variant_id)
            snap = snapshot_of(s, chain.snapshot_id)
        self._snap = snap
        info = chain_info(chain, variant)
        try:
            code_dir = Path(chain.code_dir)
            if not code_dir.is_dir() and snap is not None:
                code_dir = ensure_materialized(snap.kind, snap.key, snap.source_dir, self.cfg.runs_dir, snap.prefix)
            if not code_dir.is_dir():
                return self._end(chain_id, Outcome(State.FAILED, f"code dir {code_dir} is missing"))
            run_dir = self._prepare_run_dir(chain, variant)
            self._settings = frozen_stages.settings(chain.stage_spec, self.cfg)
            code_dir = self._own_code_view(chain, snap, code_dir, run_dir)
        except Exception as exc:  # a broken snapshot fails this chain only
            if environment_problem(exc) is None:
                return self._end(chain_id, Outcome(State.FAILED, f"could not prepare the chain: {exc}"))
            # An unwritable or full runs dir would fail every queued chain in turn: stop instead.
            recorded, new_id = requeue_after_error(self.store, self.cfg, chain_id, f"could not prepare the chain: {exc}", self.report)
            raise environment_stop(exc, chain_id, recorded, new_id) from None

        checkpoint: Optional[str] = eval_request.first_checkpoint(chain)
        chain_stages = list(eval_request.chain_stages(chain))
        try:
            for i, stage in enumerate(chain_stages):
                self._stages_left = chain_stages[i + 1:]
                outcome = self._run_stage(info, chain, variant, stage, run_dir, code_dir, checkpoint)
                if outcome.recorded:  # already ended (cancelled, or ended by the stage itself)
                    return self._current_state(chain_id)
                if outcome.state is State.INTERRUPTED:  # a worker stop: as after a SIGKILL, re-queued
                    requeue_after_error(self.store, self.cfg, chain_id, outcome.reason, self.report)
                    return self._current_state(chain_id)
                if not outcome.ok:
                    return self._end(chain_id, outcome)
                checkpoint = outcome.checkpoint or checkpoint
        except BaseException as exc:
            # A bug, a store failure or a full disk in the worker: stop the stage (orphans hold
            # GPU memory), re-queue the chain (it did nothing wrong) and let the error surface,
            # as one line when it is the machine's. If even the re-queue cannot be written, the
            # chain stays `running` and the next worker start interrupts and re-queues it.
            if self._live is not None:
                try:
                    procs.stop_stage(self._live, self._grace(), cut_short=self._forced,
                                     lineage=lambda: self._lineage(self._live.pid))
                except Exception:
                    pass
            reason = f"worker error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
            recorded, new_id = requeue_after_error(self.store, self.cfg, chain_id, reason, self.report)
            stop = environment_stop(exc, chain_id, recorded, new_id)
            if stop is not None:
                raise stop from None
            raise
        finally:
            self._drop_prestarted("the chain ended before its evaluation")
            self._live = None
            self._restore_recipe()
        return self._current_state(chain_id)

    def _own_code_view(self, chain: Chain, snap, code_dir: Path, run_dir: Path) -> Path:
        """Say when the chain's frozen stage settings differ from opsdctl.toml as it is now; run in
        the chain's own view of its snapshot (code_view.py), so that nothing a stage does to its code
        reaches another chain."""
        changed = frozen_stages.differences(chain.stage_spec, frozen_stages.config_now(self.cfg))
        if changed:
            self.report(f"chain {chain.id}: runs the stage settings frozen when it was queued; opsdctl.toml "
                        f"has changed {', '.join(changed)} since (chains queued later use the new ones)")
        if snap is None or snap.kind == "live":
            return code_dir
        return code_view.make_view(self._snapshot_root(snap), run_dir / "code") / snap.prefix

    def _snapshot_root(self, snap) -> Path:
        return ensure_materialized(snap.kind, snap.key, snap.source_dir, self.cfg.runs_dir)

    def _repair_code(self, chain: Chain, snap, view: Optional[Path]) -> bool:
        """The shared snapshot and the chain's view as they were queued (snapshot_check.py);
        True when something had to be put back."""
        if snap is None or snap.kind == "live":
            return False
        done = repair_snapshot(snap.kind, snap.key, snap.source_dir, self.cfg.runs_dir, view)
        for words in done:
            self.report(f"chain {chain.id}: {words}")
        return bool(done)

    def _prepare_run_dir(self, chain: Chain, variant: Variant) -> Path:
        run_dir = run_dir_of(self.cfg, chain.id)
        if run_dir.exists() and any(run_dir.iterdir()):
            # Left by an older store that reused this id: keep it, out of the way.
            stale = run_dir.with_name(f"{run_dir.name}.stale-{int(time.time())}")
            os.rename(run_dir, stale)
            self.report(f"chain {chain.id}: moved an old {run_dir} aside to {stale.name}")
        run_dir.mkdir(parents=True, exist_ok=True)
        doc = recipe_json(variant.name, variant.version, variant.description, variant.hparams, variant.method)
        atomic_write_json(run_dir / "recipe.json", doc)
        header = [f"opsdctl variant {variant.label} (sha256 {variant.hash})", f"chain {chain.id}, seed {chain.seed}"]
        atomic_write_text(run_dir / "recipe.env", knobs.format_recipe_env(variant.hparams, header))
        return run_dir

    def _report_cancel(self, chain_id: int, where: str) -> None:
        """Say in the worker log that someone else (`opsdctl cancel`) ended the chain."""
        with self.store.read() as s:
            chain = s.get(Chain, chain_id)
            state, reason = chain.state, chain.reason
        self.report(f"chain {chain_id}: {reason or state} {where}")

    def _current_state(self, chain_id: int) -> State:
        with self.store.read() as s:
            return State(s.get(Chain, chain_id).state)

    def _end(self, chain_id: int, outcome: Outcome, score=None) -> State:
        """Move the chain to its outcome (guarded: a concurrent cancel wins)."""
        with self.store.write() as s:
            moved = transition(s, chain_id, State.RUNNING, outcome)
            if moved and score is not None:
                s.add(score)
            current = State(s.get(Chain, chain_id).state)
        if moved and not outcome.ok:
            tail = f": {outcome.reason}" if outcome.reason else ""
            self.report(f"chain {chain_id}: {outcome.state}{tail}")
        return current

    # --- one stage ------------------------------------------------------------------------

    def _launch(self, chain, variant, stage, run_dir, code_dir, checkpoint, grant: Grant) -> _Launch:
        """What starting `stage` on `grant` means: its rendered command, environment, token and paths."""
        gpus = tuple(grant.gpus)
        gpus_text = grant.visible if grant.visible is not None else ",".join(str(g) for g in gpus)  # as the gate spells it
        stage_dir = run_dir / stage
        stage_dir.mkdir(parents=True, exist_ok=True)
        log_path = run_dir / f"{stage}.log"
        values = {
            "chain_id": chain.id,
            "variant": variant.label,
            "seed": chain.seed,
            "run_dir": run_dir,
            "stage_dir": stage_dir,
            "code_dir": code_dir,
            "recipe_env": run_dir / "recipe.env",
            "recipe_json": run_dir / "recipe.json",
            "gpus": gpus_text,
            "num_gpus": len(gpus),
            "python": stages.python_executable(),
            "profile": chain.profile,
        }
        if checkpoint is not None:
            values["checkpoint"] = checkpoint
        if stage == "eval":
            values.update(eval_request.placeholders(chain))
        values.update(stages.layout_values(self._settings.command(stage), chain.profile, len(gpus)))  # {grad_accum}
        command = stages.render(self._settings.command(stage), values)
        token = uuid.uuid4().hex
        env = stages.stage_env(
            hparams=variant.hparams, method=variant.method, chain_id=chain.id, stage=stage, stage_dir=stage_dir,
            run_dir=run_dir, token=token, gpus=gpus, code_dir=code_dir, runs_dir=self.cfg.runs_dir,
            store_url=self.store.url,
        )
        if stage == "eval":
            eval_request.apply_env(env, chain)
        env.update(dict(grant.env))
        env["CUDA_VISIBLE_DEVICES"] = gpus_text
        return _Launch(stage, command, env, token, values, stage_dir, log_path)

    def _checkpoint_path(self, values: dict, code_dir: Path) -> Path:
        """Where the train stage leaves its checkpoint ([stages.train] checkpoint, rendered)."""
        ckpt = Path(stages.render(self._settings.checkpoint, values, quote=False))
        return ckpt if ckpt.is_absolute() else code_dir / ckpt

    def _run_stage(self, info, chain, variant, stage, run_dir, code_dir, checkpoint) -> Outcome:
        grant = self._wait_for_grant(info, stage)
        if not isinstance(grant, Grant):
            self._drop_prestarted("the chain ended before its evaluation")
            return grant  # an Outcome that ends the chain
        try:
            if self._repair_code(chain, self._snap, run_dir / "code"):
                self._drop_prestarted("its code was put back as queued")  # it may have read the changed code
        except UserError as exc:  # a changed copy that cannot be rebuilt
            self._drop_prestarted("its code snapshot was dropped")
            return Outcome(State.FAILED, f"{stage} not started: {exc}")
        gpus = tuple(grant.gpus)
        try:
            launch = self._launch(chain, variant, stage, run_dir, code_dir, checkpoint, grant)
        except UserError as exc:  # a command frozen before quoted placeholders were refused
            self._drop_prestarted("its eval could not be rendered")
            return Outcome(State.FAILED, f"{stage} not started: {exc}")
        held = self._take_prestarted(launch)  # started while training ran, now given this stage
        if held is not None:
            launch = held.launch
        command, token, values = launch.command, launch.token, launch.values
        stage_dir, log_path, env = launch.stage_dir, launch.log_path, launch.env
        stage_cfg = self.cfg.stages[stage]  # its timeout; what runs is the chain's own (frozen) settings
        with self.store.write() as s:
            reason = s.get(Chain, chain.id).reason
            if s.get(Chain, chain.id).state != State.RUNNING.value:
                self.report(f"chain {chain.id}: {reason or 'cancelled'} before {stage} started")
                return Outcome(State.CANCELLED, reason, recorded=True)
            s.get(Chain, chain.id).stage = stage
            row = Stage(
                chain_id=chain.id, name=stage, state=State.RUNNING.value, command=command, cwd=str(code_dir),
                token=token, host=self.host, gpus=values["gpus"], log_path=str(log_path), stage_dir=str(stage_dir),
                estimate_seconds=grant.estimate_seconds,
            )
            s.add(row)
            s.flush()
            stage_id = row.id
        if self.stop_request:  # a signal arrived between the claim and the start
            reason = f"worker stopped ({self.stop_request.reason}) before {stage}"
            return self._finish_stage(stage_id, Outcome(State.INTERRUPTED, reason), 0.0)
        if stage == "train" and self._settings.recipe_env_path:
            try:
                self._install_recipe(chain, code_dir, run_dir)
            except Exception as exc:
                reason = f"could not write the recipe to [stages.train] recipe_env_path: {exc}"
                return self._finish_stage(stage_id, Outcome(State.FAILED, reason), 0.0)
        watch = _Watch()
        leader: list[int] = []  # the sampler starts first, so its baseline is the GPUs before the stage
        sampler = gpu_sampler.sampler_for_stage(gpus, lambda: _stage_pids(leader, watch),
                                                self.cfg.section("gpus").get("sample_seconds", 1.0))
        started = time.monotonic()
        self._children_before = subreaper.children() - ({held.proc.pid} if held is not None else set())
        try:
            proc = self._go(held) if held is not None else stages.spawn(command, code_dir, env, log_path)
        except OSError as exc:
            if sampler is not None:
                sampler.stop()
            if environment_problem(exc) is not None:
                raise  # not this chain's fault: run_chain re-queues it and the worker stops
            self._finish_stage(stage_id, Outcome(State.FAILED, f"could not start: {exc}"), time.monotonic() - started)
            return Outcome(State.FAILED, f"{stage} could not start: {exc}")
        leader.append(proc.pid)
        ident = procs.StageIdentity(proc.pid, proc.pid, procs.create_time_of(proc.pid), token)
        self._live = ident
        with self.store.write() as s:
            row = s.get(Stage, stage_id)
            row.pid, row.pgid, row.create_time = proc.pid, proc.pid, ident.create_time
        how_started = f"given the go after {_fmt_s(started - held.started)} held" if held is not None else "started"
        self.report(f"chain {chain.id} {variant.label} seed {chain.seed}: {stage} {how_started} (pid {proc.pid}, log {log_path})")
        self._activity(f"chain {chain.id}: {stage} (pid {proc.pid})")
        if stage == "train" and "eval" in self._stages_left and self._settings.eval_prestart:
            self._prestart(chain, variant, run_dir, code_dir, self._checkpoint_path(values, code_dir), grant)

        ended = self._watch(_Watched(info, stage, stage_id, proc, ident, stage_dir, log_path,
                                     stage_cfg.timeout_minutes, watch, started))
        seconds = time.monotonic() - started
        rc = proc.returncode
        if ended is None and self._current_state(chain.id) != State.RUNNING:
            ended = CANCELLED_WHILE_RUNNING  # e.g. `opsdctl cancel` killed it first
        if ended is None:
            # Recorded before its output is read: a worker killed while reading it leaves salvage
            # the fact that training ended (exit 0 + the checkpoint), so it is never trained again.
            with self.store.write() as s:
                s.get(Stage, stage_id).exit_code = rc

        # Whatever the outcome, nothing of this stage may outlive it (orphans hold GPU memory).
        leftover = procs.stop_stage(ident, self._grace(), reap=lambda: proc.poll(), cut_short=self._forced,
                                    lineage=lambda: self._lineage(proc.pid))
        self._live = None
        self._record_gpu_usage(stage_id, sampler)
        self._restore_recipe()
        if ended is None and leftover.found:
            self.report(f"chain {chain.id}: {stage} exited but left {leftover.found} process(es); {leftover.summary()}")
        try:
            self.gate.released(info, stage, sorted(watch.pids | {proc.pid}))
        except Exception as exc:  # a policy error must not leave the chain running
            self.report(f"chain {chain.id}: gate.released failed: {exc}")
        self._record_train_stats(chain.id, stage, stage_dir, log_path)

        if ended is not None:
            self._finish_stage(stage_id, replace(ended, exit_code=rc), seconds, watch)
            if ended.state is State.CANCELLED and ended.recorded:
                self._report_cancel(chain.id, f"during {stage}, after {_fmt_s(seconds)}; its processes were stopped")
            if ended.by_policy:
                partial = self._partial_score(chain.id, stage, stage_dir, watch) if stage == "eval" else None
                self._end(chain.id, ended, score=partial)
                return replace(ended, recorded=True)
            return ended

        # The process exited on its own.
        if rc != 0:
            hint = failure_hint(chain.id, stage, rc, chain.stage_spec, frozen_stages.config_now(self.cfg),
                                eval_only_possible=stage == "eval")
            reason = f"{stage} {_exit_words(rc)}{_last_line(log_path)}{hint}"
            return self._finish_stage(stage_id, Outcome(State.FAILED, reason, rc), seconds, watch)
        if stage == "train":
            ckpt = self._checkpoint_path(values, code_dir)
            if not ckpt.exists():
                reason = f"train exited 0 but left no checkpoint at {ckpt} (see [stages.train] checkpoint)"
                return self._finish_stage(stage_id, Outcome(State.FAILED, reason, rc), seconds, watch)
            check = self._check_recipe(chain, variant, stage_id, log_path)
            if check.status == MISMATCH:
                return self._finish_stage(stage_id, Outcome(State.FAILED, check.reason, rc, checkpoint=str(ckpt)), seconds, watch)
            done = self._finish_stage(stage_id, Outcome(State.SUCCEEDED, None, rc, checkpoint=str(ckpt)), seconds, watch)
            self.report(f"chain {chain.id}: train done in {seconds:.1f}s, checkpoint {ckpt}")
            return done
        try:
            result = results.read_eval_result(stage_dir, log_path)
        except results.ResultError as exc:
            self._finish_stage(stage_id, Outcome(State.FAILED, str(exc), rc), seconds, watch)
            return Outcome(State.FAILED, f"eval result rejected: {exc}", rc)
        if result is None:
            reason = f"eval exited 0 but wrote no {stage_dir / 'result.json'} and no FINAL line in its log"
            return self._finish_stage(stage_id, Outcome(State.FAILED, reason, rc), seconds, watch)
        self._finish_stage(stage_id, Outcome(State.SUCCEEDED, None, rc), seconds, watch)
        mismatch = eval_request.flag_result(result, chain)
        if mismatch:
            self.report(f"chain {chain.id}: {mismatch}")
        score = _score_row(chain.id, result, seconds)
        state = self._end(chain.id, Outcome(State.SUCCEEDED, None, rc), score=score)
        if state == State.SUCCEEDED:
            self.report(f"chain {chain.id} {variant.label} seed {chain.seed}: succeeded, avg@{result.k} = "
                        f"{result.avg_at_k:.2f}" + (" (partial)" if result.partial else "") + f" (eval {seconds:.1f}s)")
        return Outcome(state, None, rc, recorded=True)  # succeeded, or a cancel that got there first

    # --- an eval started ahead of its turn (DEVELOPERS.md, "prestart") ---------------

    def _prestart(self, chain, variant, run_dir, code_dir, checkpoint: Path, grant: Grant) -> None:
        """Start the eval now, as if granted what the train stage was (its GPUs and their
        environment), holding on a pipe until the go: its interpreter and imports run while
        training does. It gets the go only if, once training has passed its checks, the eval's own
        grant starts it exactly so; otherwise it is dropped."""
        try:
            launch = self._launch(chain, variant, "eval", run_dir, code_dir, str(checkpoint), grant)
        except UserError:
            return  # the eval stage itself fails with the reason when its turn comes
        read_fd, write_fd = os.pipe()
        env = {**launch.env, stages.ENV_GO_FD: str(read_fd)}
        try:
            proc = stages.spawn(launch.command, code_dir, env, launch.log_path, pass_fds=(read_fd,))
        except OSError as exc:
            os.close(write_fd)
            self.report(f"chain {chain.id}: could not start its eval ahead of time ({exc}); it starts after training")
            return
        finally:
            os.close(read_fd)
        ident = procs.StageIdentity(proc.pid, proc.pid, procs.create_time_of(proc.pid), launch.token)
        self._prestarted = _Prestarted(launch, proc, write_fd, ident, time.monotonic())
        self.report(f"chain {chain.id}: eval started ahead (pid {proc.pid}): it imports while training runs, "
                    "then waits for the go")

    def _take_prestarted(self, launch: _Launch) -> Optional[_Prestarted]:
        """The pre-started eval, if it is still waiting and would run exactly `launch`."""
        held, self._prestarted = self._prestarted, None
        if held is None:
            return None
        if held.proc.poll() is not None or not held.launch.same_run(launch):
            why = (f"it exited ({_exit_words(held.proc.returncode)}) before its go" if held.proc.poll() is not None
                   else "the eval was granted other GPUs or settings")
            self._prestarted = held
            self._drop_prestarted(why)
            return None
        return held

    def _go(self, held: _Prestarted) -> subprocess.Popen:
        try:
            os.write(held.go_fd, b"1")
        finally:
            os.close(held.go_fd)
        return held.proc

    def _drop_prestarted(self, why: str) -> None:
        """No go: close its pipe (it exits on its own) and stop its process group."""
        held, self._prestarted = self._prestarted, None
        if held is None:
            return
        try:
            os.close(held.go_fd)
        except OSError:
            pass
        try:
            with open(held.launch.log_path, "ab") as log:
                log.write(f"opsdctl: the eval started ahead of time gets no go: {why}\n".encode())
        except OSError:
            pass
        # it exits on its own at end of file: a few seconds for that (a loaded machine is slow to
        # schedule it) before its group is signalled, so it can say why it stopped
        try:
            held.proc.wait(timeout=min(NO_GO_EXIT_S, self._grace()))
        except subprocess.TimeoutExpired:
            pass
        procs.stop_stage(held.ident, self._grace(), reap=lambda: held.proc.poll(), cut_short=self._forced)

    def _wait_for_grant(self, info: ChainInfo, stage: str):
        while True:
            decision = self.gate.grant(info, stage)
            if isinstance(decision, Grant):
                return decision
            if isinstance(decision, Skip):
                return Outcome(State.SKIPPED, f"{stage}: {decision.reason}")
            if isinstance(decision, Wait):
                self._activity(f"chain {info.chain_id}: {stage} waits: {decision.reason}")
                end = time.monotonic() + max(0.05, decision.seconds)
                while time.monotonic() < end:
                    if self.stop_request:
                        return Outcome(State.INTERRUPTED, f"worker stopped ({self.stop_request.reason}) before {stage}")
                    if self._current_state(info.chain_id) != State.RUNNING:
                        self._report_cancel(info.chain_id, f"while {stage} waited: {decision.reason}")
                        return Outcome(State.CANCELLED, recorded=True)
                    time.sleep(min(0.5, max(0.0, end - time.monotonic())))
                continue
            raise TypeError(f"gate.grant returned {decision!r}; expected Grant, Skip or Wait")

    def _watch(self, w: "_Watched") -> Optional[Outcome]:
        """Wait for the stage to end. Returns None when its process exited on its own (what that
        means is for its output to say), else how it was ended: cancelled (already recorded),
        interrupted by a worker stop, failed on its timeout, or stopped by the gate's policy."""
        info, stage, stage_id, proc, ident = w.info, w.stage, w.stage_id, w.proc, w.ident
        stage_dir, log_path, timeout_min, watch, started = w.stage_dir, w.log_path, w.timeout_min, w.watch, w.started
        profile = PROFILES.get(info.profile)
        adapter = results.LogProgress(stage, profile.max_steps if profile and stage == "train" else None)
        deadline = started + timeout_min * 60.0 if timeout_min else None
        next_progress = next_state = next_write = 0.0
        next_pids = 0.0
        next_report = started + REPORT_S
        reported = None
        while True:
            if proc.poll() is not None:
                self._read_progress(info, stage, stage_dir, log_path, adapter, watch)
                self._write_progress(stage_id, watch)
                return None
            now = time.monotonic()
            if self.stop_request:
                reason = f"worker stopped ({self.stop_request.reason}) during {stage}"
                self._stop(ident, proc, force=self.stop_request.force)
                return Outcome(State.INTERRUPTED, reason)
            if deadline is not None and now >= deadline:
                self._stop(ident, proc)
                return Outcome(State.FAILED, f"{stage} timed out after {timeout_min:g} min ([stages.{stage}] timeout_minutes)")
            if now >= next_pids:
                watch.pids.update(procs.descendants(proc.pid))
                next_pids = now + 2.0
            if now >= next_progress:
                stop = self._read_progress(info, stage, stage_dir, log_path, adapter, watch)
                next_progress = now + PROGRESS_S
                self._note_stall(info.chain_id, stage, watch)
                if stop is not None:
                    self._stop(ident, proc)
                    return Outcome(stop.state, stop.reason, by_policy=True)
            if now >= next_state:
                next_state = now + STATE_CHECK_S
                if self._current_state(info.chain_id) != State.RUNNING:
                    self._stop(ident, proc)
                    return CANCELLED_WHILE_RUNNING
            if now >= next_write:
                self._write_progress(stage_id, watch)
                next_write = now + PROGRESS_WRITE_S
            if now >= next_report:
                next_report = now + REPORT_S
                p = results.progress_from_record(watch.last_progress) if watch.last_progress else None
                text = p.text() if p else "running"
                if text != reported:
                    reported = text
                    self.report(f"chain {info.chain_id}: {stage} {text} ({_fmt_s(now - started)})")
            self._heartbeat()
            time.sleep(POLL_S)

    def _stop(self, ident, proc, force: bool = False) -> None:
        grace = 0.0 if force else self._grace()
        report = procs.stop_stage(ident, grace, reap=lambda: proc.poll(), cut_short=self._forced,
                                  lineage=lambda: self._lineage(proc.pid))
        if report.survivors:
            self.report(f"pid(s) {report.survivors} survived SIGKILL (uninterruptible?)")
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _lineage(self, leader: int):
        """The running stage's processes by descent, its escaped and orphaned ones included."""
        known = set(self._children_before)
        if self._prestarted is not None:
            known.add(self._prestarted.proc.pid)
        return subreaper.lineage(leader, known)

    def _grace(self) -> float:
        return 0.0 if self.stop_request.force else self.cfg.kill_grace_seconds

    def _forced(self) -> bool:
        """Re-read while a stage's grace period runs: a second signal kills now."""
        return self.stop_request.force

    # --- the recipe at recipe_env_path, and the check that it was used ---------------------

    def _install_recipe(self, chain: Chain, code_dir: Path, run_dir: Path) -> None:
        rel = self._settings.recipe_env_path
        self._recipe = recipe_file.install(code_dir, rel, (run_dir / "recipe.env").read_text(), run_dir)
        self.report(f"chain {chain.id}: the variant's recipe.env is at {code_dir / rel} for the train stage")

    def _restore_recipe(self) -> None:
        if self._recipe is None:
            return
        installed, self._recipe = self._recipe, None
        try:
            installed.restore(self.report)
        except OSError as exc:  # recovery tries again from the journal
            self.report(f"could not restore the file at recipe_env_path: {exc}")

    def _check_recipe(self, chain: Chain, variant: Variant, stage_id: int, log_path: Path) -> RecipeCheck:
        profile = PROFILES.get(chain.profile)
        try:
            check = check_log(read_tail(log_path, results.STATS_TAIL_BYTES), variant.hparams, variant.method,
                              max_steps=profile.max_steps if profile else None,
                              lr_scale=profile.learning_rate_scale if profile else 1.0, expect=self._settings.expect)
        except Exception as exc:  # a bug in the check must not fail a good run
            check = RecipeCheck(unchecked=[f"the check itself failed: {type(exc).__name__}: {exc}"])
        with self.store.write() as s:
            s.get(Stage, stage_id).recipe_check = check.to_dict()
        self.report(f"chain {chain.id}: {check.summary()}")
        return check

    # --- progress -------------------------------------------------------------------------

    def _read_progress(self, info, stage, stage_dir, log_path, adapter, watch) -> Optional[Stop]:
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
                stop = self.gate.on_progress(info, stage, rec)
            except Exception as exc:
                self.report(f"chain {info.chain_id}: gate.on_progress failed: {exc}")
                stop = None
            if stop is not None:
                return stop
        return None

    def _write_progress(self, stage_id: int, watch: _Watch) -> None:
        if watch.last_progress is None or watch.last_progress == watch.written_progress:
            return
        p = results.progress_from_record(watch.last_progress)
        if p is None:
            return
        p.source = watch.last_progress.get("source", p.source)
        with self.store.write() as s:
            s.get(Stage, stage_id).progress = {**p.to_dict(), **watch.clock.fields()}
        watch.written_progress = watch.last_progress

    def _note_stall(self, chain_id: int, stage: str, watch: _Watch) -> None:
        """Feed the stall clock; say once per quiet spell in the worker log that the stage stalls."""
        now = utcnow()
        watch.clock.observe(watch.last_progress, now)
        fields = watch.clock.fields()
        quiet = stalled(fields, now)
        if quiet is not None and watch.stall_noted != fields["changed_at"]:
            watch.stall_noted = fields["changed_at"]
            self.report(f"chain {chain_id}: {stage} stalls: no progress for {_fmt_s(quiet['for_s'])} "
                        f"(usually every {_fmt_s(quiet['interval_s'])})")

    # --- records --------------------------------------------------------------------------

    def _finish_stage(self, stage_id, outcome: Outcome, seconds: float, watch: Optional[_Watch] = None) -> Outcome:
        """Write the stage row's end from its outcome; return the outcome."""
        with self.store.write() as s:
            row = s.get(Stage, stage_id)
            row.state = outcome.stage_value
            row.exit_code = outcome.exit_code
            row.finished_at = utcnow()
            row.seconds = round(seconds, 3)
            row.reason = one_line(outcome.reason) if outcome.reason else outcome.reason  # it may quote the stage's log
            if outcome.checkpoint is not None:
                row.checkpoint = outcome.checkpoint
            if watch is not None:
                row.pids = sorted(watch.pids | ({row.pid} if row.pid else set()))
                p = results.progress_from_record(watch.last_progress) if watch.last_progress else None
                if p is not None:
                    p.source = watch.last_progress.get("source", p.source)
                    row.progress = p.to_dict()
        return outcome

    def _record_train_stats(self, chain_id: int, stage: str, stage_dir: Path, log_path: Path) -> None:
        if stage != "train":
            return
        try:
            summary = results.read_train_summary(stage_dir, log_path)
            declared = self.cfg.stages["train"].metrics  # [stages.train.metrics]
            if declared and log_path.is_file():
                summary = log_metrics.apply(summary, read_tail(log_path, results.STATS_TAIL_BYTES), declared)
        except Exception as exc:  # statistics are a bonus; never fail a chain over them
            self.report(f"chain {chain_id}: could not read training statistics: {exc}")
            return
        if summary is None:
            return
        with self.store.write() as s:
            s.add(TrainStats(chain_id=chain_id, **summary.to_dict()))

    def _record_gpu_usage(self, stage_id: int, sampler: Optional[gpu_sampler.GpuSampler]) -> None:
        usage = sampler.stop() if sampler is not None else None
        if usage is None:
            return
        with self.store.write() as s:
            row = s.get(Stage, stage_id)
            row.gpu_peak_mib, row.gpu_util_pct, row.gpu = usage.peak_mib, usage.util_pct, usage.to_json()

    def _partial_score(self, chain_id, stage, stage_dir: Path, watch: _Watch) -> Optional[Score]:
        result = None
        try:
            if (stage_dir / "result.json").is_file():
                result = results.read_result_json(stage_dir / "result.json")
        except results.ResultError:
            result = None
        if result is None and watch.last_problems_record is not None:
            result = results.partial_from_progress(watch.last_problems_record)
        if result is None:
            return None
        result.partial = True
        return _score_row(chain_id, result, None)

    def _activity(self, text: str) -> None:
        if self.worker_run_id is None:
            return
        with self.store.write() as s:
            row = s.get(WorkerRun, self.worker_run_id)
            row.activity = text
            row.heartbeat_at = utcnow()
        self._last_heartbeat = time.monotonic()

    def _heartbeat(self) -> None:
        if self.worker_run_id is None or time.monotonic() - self._last_heartbeat < HEARTBEAT_S:
            return
        self._last_heartbeat = time.monotonic()
        with self.store.write() as s:
            s.get(WorkerRun, self.worker_run_id).heartbeat_at = utcnow()


def _stage_pids(leader: list[int], watch: _Watch) -> set[int]:
    """The stage's own processes now: its leader, their descendants, and every one seen before."""
    if not leader:
        return set()
    return {leader[0]} | watch.pids.copy() | set(procs.descendants(leader[0]))


def _has_file_progress(watch: _Watch) -> bool:
    return watch.last_progress is not None and watch.last_progress.get("source") == "progress.jsonl"


def _fmt_s(seconds: float) -> str:
    from opsdctl.plan.budget import fmt_duration

    return fmt_duration(seconds)


def _exit_words(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"was killed by {name}"
    return f"exited with code {rc}"


def _last_line(log_path: Path) -> str:
    lines = [l.strip() for l in read_tail(log_path, 8192).replace("\r", "\n").splitlines() if l.strip()]
    if not lines:
        return " (empty log)"
    last = lines[-1]
    return f"; last log line: {last[:200]}"
