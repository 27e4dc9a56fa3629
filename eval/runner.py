"""The parent process of an evaluation: plan, start workers, collect, record, summarise.

The parent never imports torch for the HF backend (workers do); it owns the output dir:
every sample a worker finishes is appended to samples.jsonl at once, so a crash loses only
the samples in flight, and a re-run skips what is there. Micro-batches are fed lazily to one
shared queue (a worker never idles while work remains); which worker computes a batch does
not change its numbers (plan.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from eval import plan as planmod
from eval import records
from eval.benchmark import Problem
from eval.settings import EvalSettings
from opsdctl.errors import UserError

PROGRESS_EVERY_S = 0.25  # progress.jsonl: at most 4 lines a second
BAR_EVERY_S = 0.5  # the human progress bar on stderr (tty); 5 s when it goes to a log
MERGED_DIR = "merged-model"
JOIN_S = 10.0
LIVENESS_S = 2.0  # how often the parent checks that its workers are alive


@dataclass
class RunOptions:
    output_dir: Path
    devices: list[str]  # CUDA_VISIBLE_DEVICES value per device; [] = CPU
    workers_per_device: int = 1  # on the CPU: the number of workers
    threads: int = 1  # torch threads per worker (fixed, so numbers do not depend on the worker count)
    dispatch: str = "dynamic"  # "dynamic" (shared queue) | "round-robin" (fixed shards; benchmarks)
    ignore_eos: bool = False  # benchmarks: force lengths
    item_max_new: Optional[Callable[[str, int], int]] = None  # benchmarks: per-item length
    start_together: bool = False  # benchmarks: hand out work only once every worker is loaded
    merged_weights: str = "push"  # vllm + adapter: "push" (start from the base, load the merge) | "dir"
    pool: str = "spawn"  # how workers start: "spawn", or "forkserver" once prewarm() imported for them
    held_seconds: Optional[float] = None  # started ahead of its turn (eval.hold): seconds spent waiting for the go
    quiet: bool = False
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))


class EvalFailed(RuntimeError):
    """A worker died or raised; what was finished is kept in samples.jsonl."""


def _worker_plan(opts: RunOptions) -> list[str]:
    if not opts.devices:
        return ["cpu"] * opts.workers_per_device
    return [d for d in opts.devices for _ in range(opts.workers_per_device)]


def preload_modules(backend: str) -> list[str]:
    """What every worker imports before its engine starts (eval.worker): the forkserver's preload."""
    mods = ["torch", "transformers", "eval.backends", "eval.grading", "opsdkit.modeling"]
    return mods + (["vllm.entrypoints.llm"] if backend == "vllm" else ["peft"])


def prewarm(backend: str, backend_options: dict) -> str:
    """Start the worker pool now: a forkserver that imports what the workers import, on the CPU
    (no CUDA call), so workers forked from it later start with their imports done. Returns the
    pool kind for RunOptions.pool. The backend's environment is set first: vLLM reads some of it
    at import."""
    from multiprocessing import forkserver

    from eval.backends import backend_env

    os.environ.update(backend_env(backend, backend_options))
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(preload_modules(backend))
    forkserver.ensure_running()
    return "forkserver"


def _prepare_vllm_model(settings: EvalSettings, out: Path, log) -> str:
    """vLLM loads weights from disk: merge the adapter once (fp32 math, out of place) into a
    model dir inside the output dir; the engines all read it."""
    if not settings.adapter:
        from opsdkit.tiny import resolve

        return resolve(settings.model)
    return _merge_to_dir(settings, out / MERGED_DIR, log)


def _merge_to_dir(settings: EvalSettings, dest: Path, log) -> str:
    """The merged model written to `dest` whole or not at all (a temp dir renamed at the end),
    so engines waiting for it never read half a file."""
    from opsdkit.modeling import load_model, load_tokenizer, merge_adapter_into

    import torch

    tmp = dest.with_name(dest.name + ".partial")
    for d in (dest, tmp):
        shutil.rmtree(d, ignore_errors=True)
    log(f"merging adapter {settings.adapter} into {settings.model} -> {dest}")
    model = load_model(settings.model, dtype=getattr(torch, settings.dtype))
    merge_adapter_into(model, settings.adapter)
    model.save_pretrained(tmp)
    load_tokenizer(settings.model).save_pretrained(tmp)
    del model
    os.replace(tmp, dest)
    return str(dest)


class _BackgroundMerge:
    """--merged-weights push: the engines start from the base model (a stable path, so vLLM's
    compile cache, keyed by the model path, hits on every chain) while this thread merges the
    adapter; each engine then loads the merged weights in place (eval.backends)."""

    def __init__(self, settings: EvalSettings, dest: Path, log):
        import threading

        self.dest, self.error = dest, None
        self.thread = threading.Thread(target=self._run, args=(settings, log), name="merge-adapter", daemon=True)
        self.thread.start()

    def _run(self, settings, log) -> None:
        try:
            t0 = time.monotonic()
            _merge_to_dir(settings, self.dest, log)
            log(f"adapter merged in {time.monotonic() - t0:.1f} s (while the engines started)")
        except BaseException as exc:  # reported by the collecting loop, which stops the workers
            self.error = f"{type(exc).__name__}: {exc}"

    def check(self) -> None:
        if self.error:
            raise EvalFailed(f"merging the adapter failed: {self.error}")

    def join(self) -> None:
        self.thread.join()


class _Bar:
    """tqdm-like progress on stderr. Its clock starts when the engines are ready (start()), not
    when the process does: a minute of engine start would otherwise read as slow generation
    and inflate the time-left estimate."""

    def __init__(self, total: int, start_done: int, quiet: bool, clock: Callable[[], float] = time.monotonic):
        self.total, self.start_done, self.quiet = total, start_done, quiet
        self.tty = sys.stderr.isatty()
        self.clock = clock
        self.t0: Optional[float] = None
        self.last = 0.0

    def start(self, at: Optional[float] = None) -> None:
        if self.t0 is None:
            self.t0 = self.clock() if at is None else at

    def show(self, done: int, force: bool = False) -> None:
        now = self.clock()
        if self.t0 is None:
            self.start(now)
        if self.quiet or (not force and now - self.last < (BAR_EVERY_S if self.tty else 5.0)):
            return
        self.last = now
        el = now - self.t0
        rate = (done - self.start_done) / el if el > 0 else 0.0
        left = (self.total - done) / rate if rate > 0 else 0.0
        pct = int(100 * done / self.total) if self.total else 100
        bar = "#" * (pct // 10)
        fmt = lambda s: f"{int(s) // 60:02d}:{int(s) % 60:02d}"  # noqa: E731
        line = f"Processed prompts: {pct:3d}%|{bar:<10}| {done}/{self.total} [{fmt(el)}<{fmt(left)}, {rate:.2f}it/s]"
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty and not self.quiet:
            print(file=sys.stderr, flush=True)


def run(settings: EvalSettings, problems: list[Problem], opts: RunOptions) -> dict:
    """Evaluate (or resume) into opts.output_dir; returns the result document (also written)."""
    from filelock import FileLock, Timeout

    t_start = time.time()
    out = Path(opts.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / ".eval.lock"))  # released by the kernel if we die
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UserError(f"--output-dir {out}: another evaluation is writing there now; wait for it to end "
                        f"or choose another --output-dir") from None
    try:
        return _run(settings, problems, opts, out, t_start)
    finally:
        lock.release()


def _run(settings: EvalSettings, problems: list[Problem], opts: RunOptions, out: Path, t_start: float) -> dict:
    settings_file = out / "settings.json"
    if not settings_file.exists():
        records.write_json_atomic(settings_file, settings.to_dict())
    problems = problems[: settings.num_problems]
    ids = [p.id for p in problems]
    k = settings.k
    samples_file, progress_file = out / "samples.jsonl", out / "progress.jsonl"

    recs, _ = records.read_samples(samples_file)
    done = records.done_map(recs, set(ids), k)
    resumed = len(done)
    total = len(ids) * k
    index = {pid: i for i, pid in enumerate(ids)}

    all_batches = planmod.make_batches(ids, k, settings.seed, settings.batch_size)
    todo = [b for b in all_batches if any((b.problem_id, s) not in done for s in b.samples)]
    dispatcher = planmod.Dispatcher(todo, proxy=[float(len(p.problem)) for p in problems])
    for (pid, _s), r in done.items():
        if isinstance(r.get("n_tokens"), (int, float)):
            dispatcher.record(index[pid], int(r["n_tokens"]))

    # A look already recorded (before a crash) is not repeated; a resume over more problems looks again.
    written = records.looks_written(progress_file)
    looks_pending = [lk for lk in planmod.look_points(k) if (lk, len(ids)) not in written]
    below = {lk: [sum(1 for s in range(lk) if (pid, s) in done) for pid in ids] for lk in looks_pending}

    def write_looks(done_now: int) -> None:
        for lk in list(looks_pending):
            if all(c >= lk for c in below[lk]):
                probs = records.summarize(ids, done, k=k, below=lk)
                records.append_line(progress_file, {
                    "done": done_now, "total": total, "look_k": lk,
                    "problems": [{"id": p["id"], "correct": p["correct"], "samples": p["samples"]} for p in probs]})
                looks_pending.remove(lk)

    worker_stats: dict[int, dict] = {}
    merged_dir: Optional[Path] = None
    bar = _Bar(total, resumed, opts.quiet)
    timing: dict = {}
    if todo:
        opts.log(f"eval: {len(ids)} problems x {k} samples, {resumed} already in {samples_file.name}, "
                 f"{len(todo)} micro-batches to run on {len(_worker_plan(opts))} worker(s) ({settings.backend})"
                 + (f", fresh draw {settings.draw} (seed {settings.seed})" if settings.draw else ""))
        (out / "result.json").unlink(missing_ok=True)  # a stale result must not outlive a failed resume
        log_file = records.SampleLog(samples_file)
        model_path = settings.model
        merge = None
        try:
            if settings.backend == "vllm" and settings.adapter and opts.merged_weights == "push":
                from opsdkit.tiny import resolve

                model_path = resolve(settings.model)
                merged_dir = out / MERGED_DIR
                merge = _BackgroundMerge(settings, merged_dir, opts.log)
            elif settings.backend == "vllm":
                model_path = _prepare_vllm_model(settings, out, opts.log)
                merged_dir = out / MERGED_DIR if settings.adapter else None
            records.append_line(progress_file, {"done": len(done), "total": total})
            write_looks(len(done))
            timing = _collect(_Collection(settings, problems, opts, model_path, dispatcher, merge, done, below, index,
                                          log_file, progress_file, total, write_looks, worker_stats, bar))
        finally:
            log_file.close()
            bar.close()
            if merge is not None:
                merge.join()  # never remove a dir the thread is still writing
            if merged_dir is not None:
                shutil.rmtree(merged_dir.with_name(merged_dir.name + ".partial"), ignore_errors=True)
                shutil.rmtree(merged_dir, ignore_errors=True)
    else:
        write_looks(len(done))

    missing = total - sum(1 for pid in ids for s in range(k) if (pid, s) in done)
    if missing:
        raise EvalFailed(f"{missing} samples missing after the run; rerun the same command to resume")
    probs = records.summarize(ids, done, k=k)
    records.append_line(progress_file, {"done": total, "total": total})
    busy = [w["busy_seconds"] for w in worker_stats.values()]
    seconds = round(time.time() - t_start, 2)
    doc = {
        "schema": records.SCHEMA,
        "k": k,
        "avg_at_k": round(records.avg_at_k(probs), 6),
        "n_problems": len(probs),
        "problems": probs,
        "partial": settings.partial,
        "seconds": seconds,
        "n_correct": sum(p["correct"] for p in probs),
        "n_samples": sum(p["samples"] for p in probs),
        "model": settings.model,
        "adapter": settings.adapter,
        "benchmark": settings.benchmark,
        "settings": settings.to_dict(),
        "resumed_samples": resumed,
        "dispatch": opts.dispatch,
        "workers": [worker_stats[w] for w in sorted(worker_stats)],
        "imbalance": round(max(busy) / (sum(busy) / len(busy)), 4) if busy and sum(busy) > 0 else None,
        "generation_seconds": timing.get("generation_seconds"),
        "samples_per_second": timing.get("samples_per_second"),
        # process start -> workers spawned -> engines ready (each worker's own phases are in "workers");
        # "held": of that, the wait for the go of a stage started ahead of its turn (eval.hold)
        "startup_seconds": {"workers_spawned": timing.get("workers_spawned_after_seconds"),
                            "engines_ready": timing.get("ready_after_seconds"),
                            "held": None if opts.held_seconds is None else round(opts.held_seconds, 2)},
    }
    records.write_json_atomic(out / "result.json", doc)
    return doc


def engine_options(backend: str, options: dict, workers_per_device: int) -> dict:
    """What each worker's engine gets: --gpu-memory-utilization is the GPU's share for all of its
    workers (vLLM reads it per engine), so W workers on one GPU get 1/W of it each."""
    out = dict(options)
    if backend == "vllm" and workers_per_device > 1 and "gpu_memory_utilization" in out:
        out["gpu_memory_utilization"] = round(float(out["gpu_memory_utilization"]) / workers_per_device, 4)
    return out


def _on_term(*_):
    raise SystemExit(143)


@dataclass
class _Collection:
    """One run of the workers: what they run, and where each finished sample goes."""

    settings: EvalSettings
    problems: list[Problem]
    opts: Any
    model_path: str
    dispatcher: Any  # planmod's dispatcher of micro-batches
    merge: Optional["_BackgroundMerge"]  # vllm: the merged weights written while the workers start
    done: dict  # (problem id, sample) -> record; filled here
    below: dict  # look k -> per-problem counts below it; filled here
    index: dict  # problem id -> its position
    log_file: Any  # records.SampleLog
    progress_file: Path
    total: int
    write_looks: Callable[[int], None]
    worker_stats: dict  # worker id -> its figures; filled here
    bar: Any


def _collect(c: _Collection) -> dict:
    """Run the workers until every batch is done; returns generation timing."""
    settings, problems, opts, model_path, dispatcher, merge = (c.settings, c.problems, c.opts, c.model_path,
                                                               c.dispatcher, c.merge)
    done, below, index, log_file, progress_file = c.done, c.below, c.index, c.log_file, c.progress_file
    total, write_looks, worker_stats, bar = c.total, c.write_looks, c.worker_stats, c.bar
    from eval.worker import worker_main

    ctx = mp.get_context(opts.pool)
    devices = _worker_plan(opts)
    n = len(devices)
    spec = {
        "backend": settings.backend, "model": model_path, "dtype": settings.dtype,
        "merged_weights": str(merge.dest) if merge is not None else None,  # vllm: load these once started
        "adapter": settings.adapter if settings.backend == "hf" else None,
        "sampling": settings.sampling(), "threads": opts.threads, "ignore_eos": opts.ignore_eos,
        "backend_options": settings.backend_options, "extract": settings.extract,
        "rows_per_batch": max(len(b.samples) for b in dispatcher.batches),
        "problems": [{"id": p.id, "problem": p.problem, "answer": p.answer} for p in problems],
    }
    results = ctx.Queue()
    shared = ctx.Queue() if opts.dispatch == "dynamic" else None
    own = [ctx.Queue() for _ in range(n)] if shared is None else None

    def task_of(b: planmod.Batch) -> dict:
        max_new = [opts.item_max_new(b.problem_id, s) for s in b.samples] if opts.item_max_new else None
        return {"bid": b.bid, "problem": b.problem, "samples": list(b.samples), "seeds": list(b.seeds),
                "max_new": max_new}

    spec["backend_options"] = engine_options(settings.backend, settings.backend_options, opts.workers_per_device)
    # vLLM sizes its KV cache from the free memory it measures while it starts: engines sharing
    # a GPU start one after another, or each would count the other's allocations as its own.
    locks = {dev: ctx.Lock() for dev in devices} if settings.backend == "vllm" and opts.workers_per_device > 1 else {}
    procs = []
    t_spawn = time.monotonic()
    from opsdkit.startup_clock import since_process_start

    spawn_at = since_process_start()  # this process's own start-up before any worker exists
    ready_at = None
    for wid, dev in enumerate(devices):
        p = ctx.Process(target=worker_main, name=f"eval-worker-{wid}",
                        args=(wid, {**spec, "device": dev}, shared if shared is not None else own[wid], results,
                              os.getpid(), locks.get(dev)))
        p.start()
        procs.append(p)

    # SIGTERM (opsdctl cancel, timeouts): unwind through `finally` so workers are stopped.
    old_term = signal.signal(signal.SIGTERM, _on_term)
    outstanding = 0
    exited: set[int] = set()
    slots = 1 if settings.backend == "hf" else max(1, settings.backend_options.get("max_num_seqs", 64)
                                                   // spec["rows_per_batch"])
    busy_cap = n * (slots + 1)  # in flight + one queued per worker
    last_progress = 0.0
    first_ready = None
    n_new = 0
    last_check = time.monotonic()
    try:
        sent_stop = False
        while len(exited) < n:
            started = not opts.start_together or len(worker_stats) == n
            if own is not None and started and not sent_stop:  # round-robin: fixed shards, decided up front
                for wid, shard in enumerate(planmod.round_robin(list(dispatcher.batches), n)):
                    for b in shard:
                        own[wid].put(task_of(b))
                    own[wid].put(None)
                dispatcher.pending.clear()
                sent_stop = True
            if shared is not None and started:
                while outstanding < busy_cap and (b := dispatcher.next()) is not None:
                    shared.put(task_of(b))
                    outstanding += 1
                if not dispatcher.pending and not sent_stop:
                    for _ in range(n):
                        shared.put(None)
                    sent_stop = True
            if merge is not None:
                merge.check()
            if time.monotonic() - last_check > LIVENESS_S:
                last_check = time.monotonic()
                for wid, p in enumerate(procs):
                    # A worker killed from outside (OOM, signal) sends nothing: notice it here.
                    if wid not in exited and not p.is_alive() and results.empty():
                        raise EvalFailed(f"worker {wid} ({devices[wid]}) died with exit code {p.exitcode}; "
                                         f"finished samples are kept, rerun the same command to resume")
            try:
                msg = results.get(timeout=0.5)
            except queue.Empty:
                continue
            kind, wid = msg[0], msg[1]
            if kind == "sample":
                rec = {key: msg[2][key] for key in records.SAMPLE_KEYS}
                key = (rec["id"], rec["sample"])
                if key in done:  # recomputed with its batch on resume: keep the first copy
                    continue
                rec["worker"] = wid
                log_file.append(rec)
                n_new += 1
                done[key] = rec
                pi = index[rec["id"]]
                dispatcher.record(pi, rec["n_tokens"])
                for lk, counts in below.items():
                    if rec["sample"] < lk:
                        counts[pi] += 1
                write_looks(len(done))
                now = time.monotonic()
                if now - last_progress >= PROGRESS_EVERY_S and len(done) < total:  # the last one: run()
                    records.append_line(progress_file, {"done": len(done), "total": total})
                    last_progress = now
                bar.show(len(done), force=len(done) == total)
            elif kind == "batch":
                outstanding -= 1
            elif kind == "ready":
                worker_stats[wid] = {"worker": wid, **msg[2]}
                if first_ready is None and (not opts.start_together or len(worker_stats) == n):
                    first_ready = time.monotonic()
                    ready_at = since_process_start()
                    bar.start(first_ready)
                    since = "the go" if opts.held_seconds is not None else "start"
                    opts.log(f"eval: {len(worker_stats)}/{n} worker(s) ready {first_ready - t_spawn:.1f} s after "
                             f"{since} (engine load {msg[2].get('load_seconds')} s); generating")
            elif kind == "exit":
                exited.add(wid)
                worker_stats.setdefault(wid, {"worker": wid}).update(msg[2])
            elif kind == "error":
                raise EvalFailed(f"worker {wid} ({devices[wid]}) failed:\n{msg[2]}")
        gen = time.monotonic() - (first_ready or time.monotonic())
        return {"generation_seconds": round(gen, 3), "samples_per_second": round(n_new / gen, 4) if gen > 0 else None,
                "workers_spawned_after_seconds": spawn_at,
                "ready_after_seconds": ready_at}
    finally:
        signal.signal(signal.SIGTERM, old_term)
        for p in procs:
            p.join(timeout=JOIN_S if len(exited) == n else 0.1)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=JOIN_S)
            if p.is_alive():
                p.kill()
                p.join()
        for q in [results, shared, *(own or [])]:
            if q is not None:
                q.cancel_join_thread()
                q.close()

