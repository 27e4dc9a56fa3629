"""A worker process: one per GPU (or several per GPU, or N on the CPU).

It pins itself to its device (CUDA_VISIBLE_DEVICES, set before torch makes its first CUDA call:
before its import, or, forked from a prewarmed pool (eval.runner.prewarm), before CUDA starts), loads the
backend, then pulls micro-batches from the shared queue until it reads None, grading every
finished row in its own main thread (math-verify's timeouts use SIGALRM) and sending it to the
parent at once. It exits when its parent dies, so no orphan keeps a GPU.

Messages to the parent (result queue): ("ready", wid, info), ("sample", wid, record),
("batch", wid, bid), ("exit", wid, stats), ("error", wid, traceback text).
"""

from __future__ import annotations

import os
import queue
import time
import traceback

PARENT_POLL_S = 1.0


def _die_with_parent() -> None:
    """Linux: have the kernel SIGKILL us when the parent goes (a SIGKILLed parent runs no cleanup)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass  # elsewhere: the getppid() poll below still ends us


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def worker_main(wid: int, spec: dict, tasks, results, parent_pid: int, start_lock=None) -> None:
    _die_with_parent()
    # Our direct parent: the evaluation's process (spawn), or its forkserver (eval.runner.prewarm),
    # which exits when the evaluation's process does. Either way, a change of parent means it died.
    launcher = os.getppid()
    if launcher == 1 or not _alive(parent_pid):  # it died before prctl took effect
        return
    device = spec["device"]
    os.environ["CUDA_VISIBLE_DEVICES"] = device if device != "cpu" else ""
    os.environ["OMP_NUM_THREADS"] = str(spec["threads"])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    try:
        from opsdkit.startup_clock import Phases, since_process_start

        spawned = since_process_start()  # the interpreter's own start, before any import of ours
        phases = Phases()
        import torch

        torch.set_num_threads(spec["threads"])
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars from every worker
        from eval.backends import make_backend
        from eval.grading import grade

        phases.mark("imports")
        if start_lock is not None:  # engines sharing this GPU start one at a time (runner.py)
            start_lock.acquire()
        try:
            backend = make_backend({**spec, "device": "cuda:0" if device != "cpu" else "cpu"})
            backend.warmup()  # one-off costs (lazy init, kernel selection) before we report ready
        finally:
            if start_lock is not None:
                start_lock.release()
        load_seconds = phases.mark("engine")
        startup = {"interpreter": spawned, **phases.summary(), **getattr(backend, "startup", {})}
        results.put(("ready", wid, {"device": device, "load_seconds": load_seconds,
                                    "push_seconds": getattr(backend, "push_seconds", None), "pid": os.getpid(),
                                    "startup_seconds": startup}))
        answers = [p["answer"] for p in spec["problems"]]
        remaining: dict[str, int] = {}
        busy = 0.0
        items = batches = 0
        no_more = False
        while True:
            # Take work while there is room: block only when idle.
            while not no_more and backend.free_slots() > 0:
                try:
                    task = tasks.get(block=not backend.busy(), timeout=PARENT_POLL_S)
                except queue.Empty:
                    if os.getppid() != launcher:
                        return
                    if backend.busy():
                        break
                    continue
                if task is None:
                    no_more = True
                    break
                t0 = time.perf_counter()
                backend.submit(task)
                remaining[task["bid"]] = len(task["samples"])
                busy += time.perf_counter() - t0
            if not backend.busy():
                if no_more:
                    break
                continue
            t0 = time.perf_counter()
            rows = backend.step()
            for row in rows:
                g = grade(row["text"], answers[row["problem"]], spec["extract"])
                rec = {"id": spec["problems"][row["problem"]]["id"], "sample": row["sample"], "seed": row["seed"],
                       "text": row["text"], "n_tokens": row["n_tokens"], "finish_reason": row["finish_reason"],
                       "extracted": g.extracted, "correct": g.correct}
                results.put(("sample", wid, rec))
                items += 1
                remaining[row["bid"]] -= 1
                if remaining[row["bid"]] == 0:
                    del remaining[row["bid"]]
                    batches += 1
                    results.put(("batch", wid, row["bid"]))
            busy += time.perf_counter() - t0
        results.put(("exit", wid, {"busy_seconds": round(busy, 3), "items": items, "batches": batches}))
    except BaseException:
        results.put(("error", wid, traceback.format_exc()))

