"""Our trainer in one GPU layout: child processes that step trainer.train.OPSDTrainer (as
bench_trainer.py drives it), and the parent that starts them, samples their host RAM, CPU and GPU
memory, and writes one JSON part.

Layouts (per-device batch x accumulation, one GPU):
- 1x4x8: the whole global batch of 32 in one process: 32 rollouts at once, 8 micro-steps;
- 4x2-share: one rank's share of the 4-GPU layout (8 rows a step; no all-reduce on one GPU);
- 4x4-share: one rank's share of the 2-GPU layout (16 rows a step);
- 2proc: two processes of 4 x 4 on one GPU at once, each with half the rollout engine's memory
  (together 32 rows a step: how much one GPU gains from overlapping two trainers).
Engines that share a GPU start one after the other (vLLM sizes its KV cache from the free memory
it sees while starting); every process waits for a common go before its first step.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from throughput.host_usage import TreeSampler, host_facts


@dataclass(frozen=True)
class Layout:
    name: str
    procs: int
    per_device: int
    accum: int
    util_factor: float  # of the profile's rollout memory (0.6 of an 80 GB H100)
    steps: int  # default optimizer steps per process (step 1 is left out of the steady figures)
    note: str


LAYOUTS = {
    "1x4x8": Layout("1x4x8", 1, 4, 8, 1.0, 21, "global batch 32 on one GPU: 1 process x 4 per device x 8 accumulation"),
    "4x2-share": Layout("4x2-share", 1, 4, 2, 1.0, 21, "one rank's share of the 4-GPU layout (4 x 2 = 8 rows a "
                        "step); the all-reduce of the LoRA gradients between ranks is not in it"),
    "4x4-share": Layout("4x4-share", 1, 4, 4, 1.0, 21, "one rank's share of the 2-GPU layout (4 x 4 = 16 rows a step)"),
    "2proc": Layout("2proc", 2, 4, 4, 0.5, 11, "two processes of 4 x 4 on one GPU at once, each with half the "
                    "rollout memory; 10 steady steps each, not 20, to fit one call"),
}
SMOKE = dict(per_device=2, completion=12, steps=3)
COMPLETION = 1024
GO_TIMEOUT_S = 900


# --- the child ------------------------------------------------------------------------------------


def child_main(args) -> int:
    """One training process: ready -> (wait for the go) -> steps; every event a JSON line."""
    import psutil

    started = psutil.Process().create_time()
    events = open(args.events, "a", buffering=1)

    def emit(event: str, **kw) -> None:
        events.write(json.dumps({"event": event, "t": time.time(), **kw}) + "\n")

    emit("started", process_start=started)
    import torch

    from bench_trainer import H100_MIB, PROFILE_UTIL, make_trainer
    from trainer.rollout import choose_backend

    if args.smoke:
        torch.set_num_threads(1)
    backend = "hf" if args.smoke else choose_backend("auto")
    util, total_mib, gpu = None, None, None
    if torch.cuda.is_available():
        total_mib = torch.cuda.get_device_properties(0).total_memory / 2**20
        gpu = torch.cuda.get_device_name(0)
    if backend == "vllm":  # the profile's budget in absolute MiB of an 80 GB H100, on any card
        util = round(PROFILE_UTIL * H100_MIB / total_mib * args.util_factor, 4)
    out = Path(args.out_dir)
    tr = make_trainer(args.model_dir, args.data, out, args.per_device, args.completion, args.steps, args.accum,
                      backend, util)
    emit("ready", backend=tr.backend.name, gpu_memory_utilization=util, gpu=gpu,
         gpu_total_mib=round(total_mib) if total_mib else None, startup=tr.startup)
    if args.go:
        deadline = time.time() + GO_TIMEOUT_S
        while not Path(args.go).exists():
            if time.time() > deadline:
                emit("error", message="no go within the timeout")
                return 1
            time.sleep(0.1)
    emit("go")
    for step in range(1, args.steps + 1):
        t0 = time.time()
        rec = tr.train_step(step)
        emit("step", step=step, start=t0, step_seconds=rec["step_seconds"], rollout_seconds=rec["rollout_seconds"],
             train_seconds=rec["step_seconds"] - rec["rollout_seconds"], completion_length=rec["completion_length"],
             rollout_peak_memory_mib=rec["rollout_peak_memory_mib"], train_peak_memory_mib=rec["train_peak_memory_mib"],
             memory_source=rec["memory_source"], loss=rec["loss"])
    tr.memory.close()
    tr.backend.close()
    emit("done")
    return 0


# --- the parent -----------------------------------------------------------------------------------


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return out


def _first(events: list[dict], name: str) -> dict | None:
    return next((e for e in events if e["event"] == name), None)


def _wait_for(path: Path, event: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if _first(read_events(path), event) or _first(read_events(path), "error"):
            return _first(read_events(path), event) is not None
        if proc.poll() is not None:
            return False
        time.sleep(0.2)
    return False


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def _mean(xs: list[float]) -> float | None:
    return round(statistics.fmean(xs), 3) if xs else None


def rank_summary(events: list[dict], exit_at: float | None) -> dict:
    """One process's figures: steady steps (2..n), step 1, memory, start-up, exit."""
    start = _first(events, "started")
    ready, go = _first(events, "ready"), _first(events, "go")
    steps = [e for e in events if e["event"] == "step"]
    steady = steps[1:]
    out = {"steps_done": len(steps), "ready": ready is not None}
    if not start or not ready:
        return out
    t0 = start["process_start"]
    out["startup"] = {"process_to_ready_s": round(ready["t"] - t0, 1), "trainer_phases_s": ready.get("startup"),
                      "backend": ready.get("backend"), "gpu_memory_utilization": ready.get("gpu_memory_utilization")}
    out["gpu"], out["gpu_total_mib"] = ready.get("gpu"), ready.get("gpu_total_mib")
    if steps and go:
        out["startup"]["first_step_end_after_ready_s"] = round(steps[0]["t"] - go["t"], 1)
        out["startup"]["process_to_first_step_end_s"] = round(ready["t"] - t0 + steps[0]["t"] - go["t"], 1)
        out["startup"]["waited_for_go_s"] = round(go["t"] - ready["t"], 1)
    if steps:
        out["first_step_s"] = round(steps[0]["step_seconds"], 3)
        out["window"] = [go["t"] if go else steps[0]["start"], steps[-1]["t"]]
    if steady:
        key = lambda k: [e[k] for e in steady]  # noqa: E731
        out["steady"] = {"steps": [e["step"] for e in steady],
                         "step_s_median": _median(key("step_seconds")), "step_s_mean": _mean(key("step_seconds")),
                         "rollout_s_median": _median(key("rollout_seconds")), "rollout_s_mean": _mean(key("rollout_seconds")),
                         "train_s_median": _median(key("train_seconds")), "train_s_mean": _mean(key("train_seconds")),
                         "completion_length_mean": _mean(key("completion_length"))}
        out["peak_memory_mib"] = {"rollout": round(max(key("rollout_peak_memory_mib"))),
                                  "train": round(max(key("train_peak_memory_mib"))),
                                  "source": steady[-1].get("memory_source")}
    out["step_records"] = [{k: e.get(k) for k in ("step", "start", "t", "step_seconds", "rollout_seconds",
                                                  "train_seconds", "rollout_peak_memory_mib",
                                                  "train_peak_memory_mib", "loss")} for e in steps]
    if exit_at and steps:
        out["exit_s"] = round(exit_at - steps[-1]["t"], 2)
    return out


def concurrent_throughput(ranks: list[dict], rows_per_step: int) -> dict | None:
    """Seconds per 32 rows while every process steps: each process's median step over the steps
    it ends inside the common window, their rates added."""
    if len(ranks) < 2 or not all(r.get("step_records") for r in ranks):
        return None
    lo = max(r["step_records"][0]["t"] for r in ranks)  # every process past its step 1
    hi = min(r["step_records"][-1]["t"] for r in ranks)
    medians = []
    for r in ranks:
        inside = [s["step_seconds"] for s in r["step_records"] if lo < s["t"] <= hi]
        if not inside:
            return {"note": "the processes' steps did not overlap"}
        medians.append(statistics.median(inside))
    rate = sum(rows_per_step / m for m in medians)
    return {"window_s": round(hi - lo, 1), "step_s_medians_in_window": [round(m, 3) for m in medians],
            "seconds_per_32_rows": round(32 / rate, 3), "rows_per_second": round(rate, 3)}


def run_layout(layout: Layout, script: Path, work: Path, model_dir: str, data: str, env: dict,
               smoke: bool = False, steps: int | None = None, timeout_s: float = 540) -> dict:
    steps = steps or (SMOKE["steps"] if smoke else layout.steps)
    per_device = SMOKE["per_device"] if smoke else layout.per_device
    completion = SMOKE["completion"] if smoke else COMPLETION
    run_dir = work / "train" / layout.name
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob("*"):
        if old.is_file():
            old.unlink()
    go = run_dir / "go"
    sampler = TreeSampler(period=1.0)
    sampler.start()
    procs, logs, pids = [], [], {}
    t_start = time.time()
    deadline = t_start + timeout_s
    ended: dict[int, float] = {}
    failure = None
    try:
        for rank in range(layout.procs):
            ev = run_dir / f"events_{rank}.jsonl"
            cmd = [sys.executable, str(script), "_train-proc", "--layout", layout.name, "--rank", str(rank),
                   "--model-dir", model_dir, "--data", data, "--events", str(ev), "--out-dir", str(run_dir / f"out{rank}"),
                   "--steps", str(steps), "--per-device", str(per_device), "--accum", str(layout.accum),
                   "--completion", str(completion), "--util-factor", str(layout.util_factor)]
            if layout.procs > 1:
                cmd += ["--go", str(go)]
            if smoke:
                cmd.append("--smoke")
            log = open(run_dir / f"rank{rank}.log", "wb")
            p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            procs.append(p)
            logs.append(log)
            pids[f"rank{rank}"] = p.pid
            sampler.watch(f"rank{rank}", p.pid)
            if layout.procs > 1 and not _wait_for(ev, "ready", p, deadline - time.time()):
                failure = f"rank {rank} did not get ready"
                break
        if failure is None and layout.procs > 1:
            go.touch()
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            for p in procs:
                if p.poll() is not None and p.pid not in ended:
                    ended[p.pid] = time.time()
            time.sleep(0.2)
        for p in procs:
            if p.poll() is None:
                failure = failure or f"timed out after {timeout_s:.0f} s"
                os.killpg(p.pid, 9)
                p.wait()
            ended.setdefault(p.pid, time.time())
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
        for log in logs:
            log.close()
        sampler.stop()
    ranks = []
    for rank, p in enumerate(procs):
        events = read_events(run_dir / f"events_{rank}.jsonl")
        r = rank_summary(events, ended.get(p.pid))
        r["exit_code"] = p.returncode
        series = sampler.series.get(f"rank{rank}")
        if series is not None:
            win = r.get("window") or [None, None]
            r["host"] = {"whole_run": series.summary(), "stepping": series.summary(win[0], win[1])}
            r["host_series"] = series.to_json()
        if p.returncode != 0 or r["steps_done"] < steps:
            r["log_tail"] = (run_dir / f"rank{rank}.log").read_text(errors="replace")[-3000:]
            failure = failure or f"rank {rank} exited {p.returncode} after {r['steps_done']} of {steps} steps"
        ranks.append(r)
    rows_per_step = per_device * layout.accum
    result = {"part": "train", "layout": layout.name, "note": layout.note, "smoke": smoke,
              "processes": layout.procs, "per_device": per_device, "accum": layout.accum,
              "rows_per_step_per_process": rows_per_step, "completion_tokens": completion, "steps": steps,
              "ranks": ranks, "gpu_memory": sampler.gpu_summary(pids), "host_facts": host_facts(),
              "wall_s": round(time.time() - t_start, 1), "ok": failure is None, "failure": failure}
    if layout.procs > 1:
        result["concurrent"] = concurrent_throughput(ranks, rows_per_step)
    hosts = [r["host"]["stepping"] for r in ranks if r.get("host")]
    if hosts:
        result["host_total_stepping"] = {
            "peak_rss_mib": sum(h.get("peak_rss_mib") or 0 for h in hosts),
            "peak_pss_mib": sum(h.get("peak_pss_mib") or 0 for h in hosts) if all(h.get("peak_pss_mib") for h in hosts) else None,
            "mean_cores": round(sum(h.get("mean_cores") or 0 for h in hosts), 2)}
    return result
