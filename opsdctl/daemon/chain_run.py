"""One running chain on this machine, from its claim to its end state (pueue's handler per task).

`ChainRun(ctx, chain_id).run()` is the whole life of a claimed (`running`) chain: prepare its
run dir and its own view of its code snapshot, then for each stage get its GPUs (the pool's,
checked by the NVML gate) and the gate's grant, render the command, start it in its own process
group, watch it (opsdctl.daemon.stage_watch), clean up its leftover processes, give its GPUs
back once its processes freed them, ingest its result, and move the chain to its end state with
one guarded transition. Everything that belongs to one running chain lives here: the live stage,
its frozen stage settings, the recipe file it installed, the stages left, its pre-started eval,
its code snapshot and the worker's children before its stage. Several ChainRuns run at once,
one thread each (opsdctl.daemon.local); a Ray node runs one (opsdctl.daemon.ray_cluster).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

from opsdctl.contract import eval_request, results
from opsdctl.contract.effective_config import MISMATCH
from opsdctl.contract.score_row import score_row
from opsdctl.daemon import frozen_stages, gpu_sampler, procs, recipe_file, stage_launch, stage_records, stages
from opsdctl.daemon.command_hint import failure_hint
from opsdctl.daemon.env_errors import environment_problem
from opsdctl.daemon.prestart import Prestart, exit_words
from opsdctl.daemon.requeue_on_error import environment_stop, requeue_after_error
from opsdctl.daemon.run_context import RunContext, run_dir_of
from opsdctl.daemon.stage_watch import CANCELLED_WHILE_RUNNING, Watch, Watched, chain_state, fmt_s, stage_pids, watch
from opsdctl.errors import UserError
from opsdctl.fsutil import atomic_write_json, atomic_write_text
from opsdctl.identity import code_view
from opsdctl.identity.snapshot import ensure_materialized
from opsdctl.identity.snapshot import repair as repair_snapshot
from opsdctl.plan.gate import Grant, Skip, Wait, chain_info
from opsdctl.recipes import knobs
from opsdctl.recipes.load import recipe_json
from opsdctl.store.engine import snapshot_of
from opsdctl.store.models import Chain, Stage, Variant
from opsdctl.store.states import Outcome, State
from opsdctl.templates import takes_gpu_count

POOL_WAIT_S = 0.5  # a stage waiting for its GPUs: how long each look at the pool may block
REGRANT_S = 2.0  # ... and how often it looks at the chain's state and the stop signal meanwhile


class ChainRun:
    def __init__(self, ctx: RunContext, chain_id: int, wider: Optional[int] = None):
        self.ctx = ctx
        self.chain_id = chain_id
        self.wider = wider  # the planner's wider slot near the deadline (gate.Start.gpus), if any
        self.live: Optional[procs.StageIdentity] = None  # the stage process group running now
        self.settings: Optional[frozen_stages.StageSettings] = None  # its frozen stage settings
        self.recipe: Optional[recipe_file.Installed] = None  # a recipe.env put at recipe_env_path, to undo
        self.stages_left: list[str] = []  # the stages after the current one
        self.prestart = Prestart(ctx, chain_id)  # its eval, started while training runs
        self.snap = None  # its code snapshot row (None: live code)
        self.children_before: set[int] = set()  # the worker's children before the running stage
        self.gpus: tuple[int, ...] = ()  # the pool's GPUs this chain holds now
        self.last_gpus: tuple[int, ...] = ()  # ... and held for its previous stage

    # --- the chain ------------------------------------------------------------------------

    def run(self) -> State:
        """Run the claimed chain to its end state and return it."""
        ctx, chain_id = self.ctx, self.chain_id
        with ctx.store.read() as s:
            chain = s.get(Chain, chain_id)
            variant = s.get(Variant, chain.variant_id)
            snap = snapshot_of(s, chain.snapshot_id)
        self.snap = snap
        info = chain_info(chain, variant)
        try:
            code_dir = Path(chain.code_dir)
            if not code_dir.is_dir() and snap is not None:
                code_dir = ensure_materialized(snap.kind, snap.key, snap.source_dir, ctx.cfg.runs_dir, snap.prefix)
            if not code_dir.is_dir():
                return stage_records.end_chain(ctx, chain_id, Outcome(State.FAILED, f"code dir {code_dir} is missing"))
            run_dir = self._prepare_run_dir(chain, variant)
            self.settings = frozen_stages.settings(chain.stage_spec, ctx.cfg)
            code_dir = self._own_code_view(chain, snap, code_dir, run_dir)
        except Exception as exc:  # a broken snapshot fails this chain only
            if environment_problem(exc) is None:
                return stage_records.end_chain(ctx, chain_id, Outcome(State.FAILED, f"could not prepare the chain: {exc}"))
            # An unwritable or full runs dir would fail every queued chain in turn: stop instead.
            recorded, new_id = requeue_after_error(ctx.store, ctx.cfg, chain_id, f"could not prepare the chain: {exc}",
                                                   ctx.report)
            raise environment_stop(exc, chain_id, recorded, new_id) from None

        checkpoint: Optional[str] = eval_request.first_checkpoint(chain)
        chain_stages = list(eval_request.chain_stages(chain))
        try:
            for i, stage in enumerate(chain_stages):
                self.stages_left = chain_stages[i + 1:]
                outcome = self._run_stage(info, chain, variant, stage, run_dir, code_dir, checkpoint)
                if outcome.recorded:  # already ended (cancelled, or ended by the stage itself)
                    return chain_state(ctx.store, chain_id)
                if outcome.state is State.INTERRUPTED:  # a worker stop: as after a SIGKILL, re-queued
                    requeue_after_error(ctx.store, ctx.cfg, chain_id, outcome.reason, ctx.report)
                    return chain_state(ctx.store, chain_id)
                if not outcome.ok:
                    return stage_records.end_chain(ctx, chain_id, outcome)
                checkpoint = outcome.checkpoint or checkpoint
        except BaseException as exc:
            # A bug, a store failure or a full disk in the worker: stop the stage (orphans hold
            # GPU memory), re-queue the chain (it did nothing wrong) and let the error surface,
            # as one line when it is the machine's. If even the re-queue cannot be written, the
            # chain stays `running` and the next worker start interrupts and re-queues it.
            if self.live is not None:
                live = self.live
                try:
                    procs.stop_stage(live, ctx.grace(), cut_short=ctx.forced, lineage=lambda: self._lineage(live.pid))
                except Exception:
                    pass
            reason = f"worker error: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
            recorded, new_id = requeue_after_error(ctx.store, ctx.cfg, chain_id, reason, ctx.report)
            stop = environment_stop(exc, chain_id, recorded, new_id)
            if stop is not None:
                raise stop from None
            raise
        finally:
            self.prestart.drop("the chain ended before its evaluation")
            if self.live is not None:
                ctx.lineages.drop(self.live.pid)
            self.live = None
            self._restore_recipe()
            self._give_back()
        return chain_state(ctx.store, chain_id)

    def _own_code_view(self, chain: Chain, snap, code_dir: Path, run_dir: Path) -> Path:
        """Say when the chain's frozen stage settings differ from opsdctl.toml as it is now; run in
        the chain's own view of its snapshot (code_view.py), so that nothing a stage does to its code
        reaches another chain."""
        changed = frozen_stages.differences(chain.stage_spec, frozen_stages.config_now(self.ctx.cfg))
        if changed:
            self.ctx.report(f"chain {chain.id}: runs the stage settings frozen when it was queued; opsdctl.toml "
                            f"has changed {', '.join(changed)} since (chains queued later use the new ones)")
        if snap is None or snap.kind == "live":
            return code_dir
        root = ensure_materialized(snap.kind, snap.key, snap.source_dir, self.ctx.cfg.runs_dir)
        return code_view.make_view(root, run_dir / "code") / snap.prefix

    def _repair_code(self, chain: Chain, view: Optional[Path]) -> bool:
        """The shared snapshot and the chain's view as they were queued (snapshot_check.py);
        True when something had to be put back."""
        snap = self.snap
        if snap is None or snap.kind == "live":
            return False
        done = repair_snapshot(snap.kind, snap.key, snap.source_dir, self.ctx.cfg.runs_dir, view)
        for words in done:
            self.ctx.report(f"chain {chain.id}: {words}")
        return bool(done)

    def _prepare_run_dir(self, chain: Chain, variant: Variant) -> Path:
        run_dir = run_dir_of(self.ctx.cfg, chain.id)
        if run_dir.exists() and any(run_dir.iterdir()):
            # Left by an older store that reused this id: keep it, out of the way.
            stale = run_dir.with_name(f"{run_dir.name}.stale-{int(time.time())}")
            os.rename(run_dir, stale)
            self.ctx.report(f"chain {chain.id}: moved an old {run_dir} aside to {stale.name}")
        run_dir.mkdir(parents=True, exist_ok=True)
        doc = recipe_json(variant.name, variant.version, variant.description, variant.hparams, variant.method)
        atomic_write_json(run_dir / "recipe.json", doc)
        header = [f"opsdctl variant {variant.label} (sha256 {variant.hash})", f"chain {chain.id}, seed {chain.seed}"]
        atomic_write_text(run_dir / "recipe.env", knobs.format_recipe_env(variant.hparams, header))
        return run_dir

    # --- one stage ------------------------------------------------------------------------

    def _run_stage(self, info, chain, variant, stage, run_dir, code_dir, checkpoint) -> Outcome:
        ctx = self.ctx
        grant = self._wait_for_grant(info, stage)
        if not isinstance(grant, Grant):
            self.prestart.drop("the chain ended before its evaluation")
            return grant  # an Outcome that ends the chain
        try:
            if self._repair_code(chain, run_dir / "code"):
                self.prestart.drop("its code was put back as queued")  # it may have read the changed code
        except UserError as exc:  # a changed copy that cannot be rebuilt
            self.prestart.drop("its code snapshot was dropped")
            return Outcome(State.FAILED, f"{stage} not started: {exc}")
        gpus = tuple(grant.gpus)
        try:
            launch = stage_launch.build(ctx, self.settings, chain, variant, stage, run_dir, code_dir,
                                        checkpoint=checkpoint, grant=grant)
        except UserError as exc:  # a command frozen before quoted placeholders were refused
            self.prestart.drop("its eval could not be rendered")
            return Outcome(State.FAILED, f"{stage} not started: {exc}")
        held = self.prestart.take(launch)  # started while training ran, now given this stage
        if held is not None:
            launch = held.launch
        command, token, values = launch.command, launch.token, launch.values
        stage_dir, log_path, env = launch.stage_dir, launch.log_path, launch.env
        stage_cfg = ctx.cfg.stages[stage]  # its timeout; what runs is the chain's own (frozen) settings
        with ctx.store.write() as s:
            reason = s.get(Chain, chain.id).reason
            if s.get(Chain, chain.id).state != State.RUNNING.value:
                ctx.report(f"chain {chain.id}: {reason or 'cancelled'} before {stage} started")
                return Outcome(State.CANCELLED, reason, recorded=True)
            s.get(Chain, chain.id).stage = stage
            row = Stage(
                chain_id=chain.id, name=stage, state=State.RUNNING.value, command=command, cwd=str(code_dir),
                token=token, host=ctx.host, gpus=values["gpus"], log_path=str(log_path), stage_dir=str(stage_dir),
                estimate_seconds=grant.estimate_seconds,
            )
            s.add(row)
            s.flush()
            stage_id = row.id
        if ctx.stop:  # a signal arrived between the claim and the start
            reason = f"worker stopped ({ctx.stop.reason}) before {stage}"
            return stage_records.finish_stage(ctx.store, stage_id, Outcome(State.INTERRUPTED, reason), 0.0)
        if stage == "train" and self.settings.recipe_env_path:
            try:
                self._install_recipe(chain, code_dir, run_dir)
            except Exception as exc:
                reason = f"could not write the recipe to [stages.train] recipe_env_path: {exc}"
                return stage_records.finish_stage(ctx.store, stage_id, Outcome(State.FAILED, reason), 0.0)
        w = Watch()
        leader: list[int] = []  # the sampler starts first, so its baseline is the GPUs before the stage
        sampler = gpu_sampler.sampler_for_stage(gpus, lambda: stage_pids(leader, w),
                                                ctx.cfg.section("gpus").get("sample_seconds", 1.0))
        started = time.monotonic()
        self.children_before = ctx.lineages.children_now() - ({held.proc.pid} if held is not None else set())
        try:
            proc = Prestart.go(held) if held is not None else ctx.lineages.start(
                chain.id, lambda: stages.spawn(command, code_dir, env, log_path))
        except OSError as exc:
            if sampler is not None:
                sampler.stop()
            if environment_problem(exc) is not None:
                raise  # not this chain's fault: run() re-queues it and the worker stops
            stage_records.finish_stage(ctx.store, stage_id, Outcome(State.FAILED, f"could not start: {exc}"),
                                       time.monotonic() - started)
            return Outcome(State.FAILED, f"{stage} could not start: {exc}")
        leader.append(proc.pid)  # registered with ctx.lineages when it was started (a held eval: ahead)
        ident = procs.StageIdentity(proc.pid, proc.pid, procs.create_time_of(proc.pid), token)
        self.live = ident
        with ctx.store.write() as s:
            row = s.get(Stage, stage_id)
            row.pid, row.pgid, row.create_time = proc.pid, proc.pid, ident.create_time
        how_started = f"given the go after {fmt_s(started - held.started)} held" if held is not None else "started"
        on = f" on GPU(s) {values['gpus']}" if ctx.pool is not None and not ctx.layout.serial else ""
        ctx.report(f"chain {chain.id} {variant.label} seed {chain.seed}: {stage} {how_started}{on} "
                   f"(pid {proc.pid}, log {log_path})")
        ctx.board.chain(chain.id, f"chain {chain.id}: {stage} (pid {proc.pid})")
        if stage == "train" and "eval" in self.stages_left and self.settings.eval_prestart:
            self._prestart(chain, variant, run_dir, code_dir, stage_launch.checkpoint_path(self.settings, values, code_dir),
                           grant)

        def stop_now(force: bool) -> None:
            self._stop(ident, proc, force)

        ended = watch(ctx, Watched(info, stage, stage_id, proc, stage_dir, log_path, stage_cfg.timeout_minutes, w,
                                   started, stop_now))
        seconds = time.monotonic() - started
        rc = proc.returncode
        if ended is None and chain_state(ctx.store, chain.id) != State.RUNNING:
            ended = CANCELLED_WHILE_RUNNING  # e.g. `opsdctl cancel` killed it first
        if ended is None:
            # Recorded before its output is read: a worker killed while reading it leaves salvage
            # the fact that training ended (exit 0 + the checkpoint), so it is never trained again.
            with ctx.store.write() as s:
                s.get(Stage, stage_id).exit_code = rc

        # Whatever the outcome, nothing of this stage may outlive it (orphans hold GPU memory).
        leftover = procs.stop_stage(ident, ctx.grace(), reap=lambda: proc.poll(), cut_short=ctx.forced,
                                    lineage=lambda: self._lineage(proc.pid))
        ctx.lineages.drop(proc.pid)
        self.live = None
        stage_records.gpu_usage(ctx.store, stage_id, sampler)
        self._restore_recipe()
        if ended is None and leftover.found:
            ctx.report(f"chain {chain.id}: {stage} exited but left {leftover.found} process(es); {leftover.summary()}")
        pids = sorted(w.pids | {proc.pid})
        if ctx.pool is not None:
            ctx.gpus.released(chain.id, stage, pids)
        try:
            ctx.gate.released(info, stage, pids)
        except Exception as exc:  # a policy error must not leave the chain running
            ctx.report(f"chain {chain.id}: gate.released failed: {exc}")
        self._give_back()
        stage_records.train_stats(ctx, chain.id, stage, stage_dir, log_path)

        if ended is not None:
            stage_records.finish_stage(ctx.store, stage_id, replace(ended, exit_code=rc), seconds, w)
            if ended.state is State.CANCELLED and ended.recorded:
                stage_records.report_cancel(ctx, chain.id, f"during {stage}, after {fmt_s(seconds)}; "
                                                           "its processes were stopped")
            if ended.by_policy:
                partial = stage_records.partial_score(chain.id, stage_dir, w) if stage == "eval" else None
                stage_records.end_chain(ctx, chain.id, ended, score=partial)
                return replace(ended, recorded=True)
            return ended

        # The process exited on its own.
        if rc != 0:
            hint = failure_hint(chain.id, stage, rc, chain.stage_spec, frozen_stages.config_now(ctx.cfg),
                                eval_only_possible=stage == "eval")
            reason = f"{stage} {exit_words(rc)}{stage_records.last_line(log_path)}{hint}"
            return stage_records.finish_stage(ctx.store, stage_id, Outcome(State.FAILED, reason, rc), seconds, w)
        if stage == "train":
            return self._train_done(chain, variant, stage_id, values, code_dir, log_path, rc=rc, seconds=seconds, w=w)
        return self._eval_done(chain, variant, stage_id, stage_dir, log_path, rc=rc, seconds=seconds, w=w)

    def _train_done(self, chain, variant, stage_id, values, code_dir, log_path, *, rc, seconds, w) -> Outcome:
        ctx = self.ctx
        ckpt = stage_launch.checkpoint_path(self.settings, values, code_dir)
        if not ckpt.exists():
            reason = f"train exited 0 but left no checkpoint at {ckpt} (see [stages.train] checkpoint)"
            return stage_records.finish_stage(ctx.store, stage_id, Outcome(State.FAILED, reason, rc), seconds, w)
        check = stage_records.recipe_check(ctx, self.settings, chain, variant, stage_id, log_path)
        if check.status == MISMATCH:
            return stage_records.finish_stage(ctx.store, stage_id, Outcome(State.FAILED, check.reason, rc,
                                                                           checkpoint=str(ckpt)), seconds, w)
        done = stage_records.finish_stage(ctx.store, stage_id, Outcome(State.SUCCEEDED, None, rc, checkpoint=str(ckpt)),
                                          seconds, w)
        ctx.report(f"chain {chain.id}: train done in {seconds:.1f}s, checkpoint {ckpt}")
        return done

    def _eval_done(self, chain, variant, stage_id, stage_dir, log_path, *, rc, seconds, w) -> Outcome:
        ctx = self.ctx
        try:
            result = results.read_eval_result(stage_dir, log_path)
        except results.ResultError as exc:
            stage_records.finish_stage(ctx.store, stage_id, Outcome(State.FAILED, str(exc), rc), seconds, w)
            return Outcome(State.FAILED, f"eval result rejected: {exc}", rc)
        if result is None:
            reason = f"eval exited 0 but wrote no {stage_dir / 'result.json'} and no FINAL line in its log"
            return stage_records.finish_stage(ctx.store, stage_id, Outcome(State.FAILED, reason, rc), seconds, w)
        stage_records.finish_stage(ctx.store, stage_id, Outcome(State.SUCCEEDED, None, rc), seconds, w)
        mismatch = eval_request.flag_result(result, chain)
        if mismatch:
            ctx.report(f"chain {chain.id}: {mismatch}")
        state = stage_records.end_chain(ctx, chain.id, Outcome(State.SUCCEEDED, None, rc),
                                        score=score_row(chain.id, result, seconds))
        if state == State.SUCCEEDED:
            ctx.report(f"chain {chain.id} {variant.label} seed {chain.seed}: succeeded, avg@{result.k} = "
                       f"{result.avg_at_k:.2f}" + (" (partial)" if result.partial else "") + f" (eval {seconds:.1f}s)")
        return Outcome(state, None, rc, recorded=True)  # succeeded, or a cancel that got there first

    def _prestart(self, chain, variant, run_dir, code_dir, checkpoint: Path, grant: Grant) -> None:
        """Start the eval now on the GPUs it will get (the first of the train stage's), holding
        until the go (opsdctl.daemon.prestart)."""
        ctx = self.ctx
        if ctx.pool is not None:
            grant = stage_launch.narrowed(grant, self._gpu_count("eval"))
        try:
            launch = stage_launch.build(ctx, self.settings, chain, variant, "eval", run_dir, code_dir,
                                        checkpoint=str(checkpoint), grant=grant)
        except UserError:
            return  # the eval stage itself fails with the reason when its turn comes
        self.prestart.start(launch, code_dir)

    # --- the stage's GPUs -----------------------------------------------------------------

    def _wait_for_grant(self, info, stage: str):
        """Grant, or the Outcome that ends the chain. With a GPU pool: the stage's own GPUs from
        it (in line behind stages that asked first), then the NVML gate on those GPUs, then the
        gate's grant (budget, estimate); without one, the gate's grant names the GPUs."""
        ctx = self.ctx
        ticket = None
        last_note = None
        try:
            while True:
                if ctx.pool is not None and not self.gpus:
                    if ticket is None:
                        ticket = ctx.pool.ticket(self.chain_id, stage, self._gpu_count(stage), self.last_gpus)
                    got = ctx.pool.take(ticket)
                    if got is None:
                        self.prestart.drop("its GPUs went to another chain's stage first")
                        decision = Wait(REGRANT_S, f"waits for {ctx.pool.waiting_for(ticket)}")
                    else:
                        ticket, self.gpus = None, got
                if ctx.pool is None or self.gpus:
                    decision = self._grant_on_gpus(info, stage)
                if isinstance(decision, Grant):
                    return decision
                if isinstance(decision, Skip):
                    return Outcome(State.SKIPPED, f"{stage}: {decision.reason}")
                if not isinstance(decision, Wait):
                    raise TypeError(f"gate.grant returned {decision!r}; expected Grant, Skip or Wait")
                note = f"chain {info.chain_id}: {stage} waits: {decision.reason}"
                if note != last_note:
                    last_note = note
                    ctx.board.chain(info.chain_id, note)
                end = time.monotonic() + max(0.05, decision.seconds)
                while time.monotonic() < end:
                    if ctx.stop:
                        return Outcome(State.INTERRUPTED, f"worker stopped ({ctx.stop.reason}) before {stage}")
                    if chain_state(ctx.store, info.chain_id) != State.RUNNING:
                        stage_records.report_cancel(ctx, info.chain_id, f"while {stage} waited: {decision.reason}")
                        return Outcome(State.CANCELLED, recorded=True)
                    if ticket is not None:  # wake as soon as the pool serves this stage
                        got = ctx.pool.take(ticket, timeout=min(POOL_WAIT_S, max(0.0, end - time.monotonic())))
                        if got is not None:
                            ticket, self.gpus = None, got
                            break
                        continue
                    ctx.board.heartbeat()
                    time.sleep(min(0.5, max(0.0, end - time.monotonic())))
        finally:
            if ticket is not None:
                ctx.pool.leave(ticket)
            ctx.gpus.forget(self.chain_id, stage)

    def _gpu_count(self, stage: str) -> int:
        """The stage's GPUs: the layout's, or the planner's wider slot when its command follows
        the GPUs it is given ({num_gpus} or {gpus})."""
        count = self.ctx.layout.gpus_of(stage)
        if self.wider and self.wider > count and takes_gpu_count(self.settings.command(stage)):
            return min(self.wider, len(self.ctx.layout.devices))
        return count

    def _grant_on_gpus(self, info, stage: str):
        """With the pool's GPUs in hand (or without a pool): the NVML gate on them, then the gate."""
        ctx = self.ctx
        checked = None
        if ctx.pool is not None:
            checked = ctx.gpus.check(self.chain_id, stage, self.gpus)
            if not isinstance(checked, Grant):
                if isinstance(checked, Skip):
                    self._give_back()
                return checked
        decision = ctx.gate.grant(info, stage)
        if isinstance(decision, Skip):
            self._give_back()
        if not isinstance(decision, Grant) or checked is None:
            return decision
        return replace(decision, gpus=checked.gpus, env=tuple(decision.env) + tuple(checked.env),
                       visible=checked.visible)

    def _give_back(self) -> None:
        if self.gpus and self.ctx.pool is not None:
            self.ctx.pool.give_back(self.gpus)
        if self.gpus:
            self.last_gpus = self.gpus
        self.gpus = ()

    # --- stopping its processes -----------------------------------------------------------

    def _stop(self, ident, proc, force: bool = False) -> None:
        grace = 0.0 if force else self.ctx.grace()
        report = procs.stop_stage(ident, grace, reap=lambda: proc.poll(), cut_short=self.ctx.forced,
                                  lineage=lambda: self._lineage(proc.pid))
        if report.survivors:
            self.ctx.report(f"pid(s) {report.survivors} survived SIGKILL (uninterruptible?)")
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _lineage(self, leader: int):
        """The running stage's processes by descent, its escaped and orphaned ones included."""
        before = set(self.children_before)
        if self.prestart.pid is not None:
            before.add(self.prestart.pid)
        return self.ctx.lineages.of(leader, self.chain_id, before)

    # --- the recipe at recipe_env_path ------------------------------------------------------

    def _install_recipe(self, chain: Chain, code_dir: Path, run_dir: Path) -> None:
        rel = self.settings.recipe_env_path
        self.recipe = recipe_file.install(code_dir, rel, (run_dir / "recipe.env").read_text(), run_dir)
        self.ctx.report(f"chain {chain.id}: the variant's recipe.env is at {code_dir / rel} for the train stage")

    def _restore_recipe(self) -> None:
        if self.recipe is None:
            return
        installed, self.recipe = self.recipe, None
        try:
            installed.restore(self.ctx.report)
        except OSError as exc:  # recovery tries again from the journal
            self.ctx.report(f"could not restore the file at recipe_env_path: {exc}")
