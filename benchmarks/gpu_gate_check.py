"""The GPU gate on a real NVIDIA machine: a foreign process holds a GPU, opsdctl waits, reports
the holder, never touches it, and starts the stage once the memory is free.

    python benchmarks/gpu_gate_check.py [--gpu 0] [--out PATH]      # real GPUs (NVML + torch)
    python benchmarks/gpu_gate_check.py --fake                       # CPU: the FakeProbe stand-in

Steps:
1. start a FOREIGN process (not started by opsdctl, its own session) that allocates most of one
   GPU's memory with torch and keeps running;
2. make a temporary workspace whose stages need `min_free_mib` more than is free while the
   foreign process holds its memory (and less than is free without it); the stages are small
   scripts that check, with torch, that they see exactly the granted GPU (UUID), and hold 1 GiB
   for a moment (so the release wait after a stage is exercised too);
3. start `opsdctl worker --drain` (the real NvmlProbe) and poll `opsdctl status --json` and
   `opsdctl gpus --json`: the worker must wait, name the holder (pid, MiB) and start nothing;
4. tell the foreign process to free its memory (it keeps running), and check that the stage
   starts, the chain succeeds, and the foreign process is still alive, never signalled;
5. print a summary and write benchmarks/results/gpu_gate_<device>.json (or --out).
`--fake` runs the same steps on a CPU machine against the FakeProbe file (no torch), as the
test suite does. Exits 0 when every check passes, 1 otherwise. Takes well under 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
HOLD_FRACTION = 0.85  # of the GPU's free memory the foreign process takes
STAGE_HOLD_MIB = 1024  # each stage holds this much for a moment
WAIT_OBSERVE_S = 6.0  # how long the worker is watched waiting before the memory is released
FAKE_TOTAL_MIB = 143771  # an H200

FOREIGN_TORCH = textwrap.dedent("""
    import sys, torch
    mib = int(sys.argv[1])
    x = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device="cuda")
    x.fill_(1); torch.cuda.synchronize()
    print("holding", mib, flush=True)
    for line in sys.stdin:
        if line.strip() == "free":
            del x; torch.cuda.synchronize(); torch.cuda.empty_cache()
            print("freed", flush=True)
        elif line.strip() == "exit":
            break
""")

FOREIGN_FAKE = textwrap.dedent("""
    import sys
    print("holding", flush=True)
    for line in sys.stdin:
        if line.strip() == "free":
            print("freed", flush=True)
        elif line.strip() == "exit":
            break
""")

STAGE = textwrap.dedent("""
    import json, os, sys, time
    stage, out = sys.argv[1], sys.argv[2]
    info = {"stage": stage, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "order": os.environ.get("CUDA_DEVICE_ORDER"), "pid": os.getpid()}
    if os.environ.get("GATE_CHECK_TORCH") == "1":
        import torch
        info["count"] = torch.cuda.device_count()
        p = torch.cuda.get_device_properties(0)
        info["name"] = p.name
        info["uuid"] = str(getattr(p, "uuid", "") or "")
        x = torch.empty(%d * 1024 * 1024, dtype=torch.uint8, device="cuda"); x.fill_(1); torch.cuda.synchronize()
        time.sleep(2)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "device.json"), "w") as f:
        json.dump(info, f)
    if stage == "train":
        os.makedirs(os.path.join(out, "checkpoint-final"), exist_ok=True)
    else:
        print("FINAL avg@12 accuracy: 50.00%% (180/360 solutions correct on 30 problems)", flush=True)
""" % STAGE_HOLD_MIB)


def opsdctl(ws: Path, env: dict, *args, check=True) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "opsdctl.cli", *args], cwd=ws, env=env, capture_output=True,
                         text=True, timeout=60)
    if check and res.returncode != 0:
        raise RuntimeError(f"opsdctl {' '.join(args)} exited {res.returncode}: {res.stderr.strip()}")
    return res


def write_fake(path: Path, procs: list[tuple[int, int]], base_used: int = 600) -> None:
    doc = {"gpus": [{"uuid": "GPU-fake-h200-0", "name": "Fake NVIDIA H200", "pci_bus_id": "00000000:19:00.0",
                     "total_mib": FAKE_TOTAL_MIB, "base_used_mib": base_used,
                     "processes": [{"pid": p, "used_mib": m} for p, m in procs]}],
           "free_dead_after_s": 1.0}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def slug(name: str) -> str:
    m = re.search(r"(H200|H100|A100|L40S?|B200|GH200|A10G?|T4|V100|L4)", name, re.I)
    return (m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")).lower()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fake", action="store_true", help="CPU: use the FakeProbe stand-in (no torch, no GPU)")
    ap.add_argument("--gpu", type=int, default=0, help="CUDA index (PCI bus order) to hold and gate")
    ap.add_argument("--out", type=Path, help="result JSON [default: benchmarks/results/gpu_gate_<device>.json]")
    ap.add_argument("--keep", action="store_true", help="keep the temporary workspace")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from opsdctl.daemon.gpu_probe import FakeProbe, NvmlProbe, ProbeUnavailable

    t_start = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="gpu_gate_check_"))
    ws = tmp / "ws"
    ws.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSDCTL_", "OPSD_"))}
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)  # keep carried packages
    env.update(PYTHONUNBUFFERED="1", COLUMNS="200", PYTHONPATH=pythonpath, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    fake_file = tmp / "gpus.json"
    checks: dict[str, bool] = {}
    notes: list[str] = []

    # 1. the GPU and the foreign process
    if args.fake:
        write_fake(fake_file, [])
        env["OPSDCTL_GPU_PROBE"] = f"fake:{fake_file}"
        probe = FakeProbe(fake_file, use_env=False)
    else:
        probe = NvmlProbe()
    try:
        inv = probe.inventory()
    except ProbeUnavailable as exc:
        print(f"no GPUs: {exc}; run with --fake on a CPU machine", file=sys.stderr)
        return 2
    gpu = next((g for g in inv if g.index_cuda == args.gpu), None)
    if gpu is None:
        print(f"CUDA index {args.gpu} not found; GPUs: {[g.index_cuda for g in inv]}", file=sys.stderr)
        return 2
    hold = int(gpu.free_mib * HOLD_FRACTION)
    fenv = dict(env, CUDA_VISIBLE_DEVICES=str(args.gpu))
    code = FOREIGN_FAKE if args.fake else FOREIGN_TORCH
    foreign = subprocess.Popen([sys.executable, "-c", code, str(hold)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=fenv, start_new_session=True)
    import psutil

    foreign_ct = psutil.Process(foreign.pid).create_time()
    line = foreign.stdout.readline().strip()
    if not line.startswith("holding"):
        print(f"the foreign process did not start: {line!r}", file=sys.stderr)
        return 1
    if args.fake:
        write_fake(fake_file, [(foreign.pid, hold)])
    time.sleep(0.5)
    held = next(g for g in probe.inventory() if g.index_cuda == args.gpu)
    min_free = held.free_mib + hold // 2  # unreachable while held, reachable once freed
    print(f"GPU {args.gpu} {gpu.name}: {gpu.total_mib} MiB; foreign pid {foreign.pid} holds {hold} MiB; "
          f"free now {held.free_mib} MiB; the stage needs {min_free} MiB free")

    # 2. the workspace
    (ws / "stage.py").write_text(STAGE)
    py = sys.executable
    (ws / "opsdctl.toml").write_text(textwrap.dedent(f"""\
        profile = "tiny"
        db = "sqlite:///runs.db"
        runs_dir = "runs"
        code_dir = "."
        snapshot_code = false

        [gpus]
        devices = [{args.gpu}]
        min_free_mib = {min_free}
        gpu_wait_minutes = 1.5
        release_wait_minutes = 0.5

        [stages.train]
        command = "{py} stage.py train {{stage_dir}}"

        [stages.eval]
        command = "{py} stage.py eval {{stage_dir}}"

        [worker]
        poll_seconds = 0.5
        kill_grace_seconds = 5
        """))
    (ws / "recipes").mkdir()
    (ws / "recipes" / "baseline.toml").write_text('name = "baseline"\n')
    if not args.fake:
        env["GATE_CHECK_TORCH"] = "1"
    opsdctl(ws, env, "queue", "baseline")

    # 3. the worker waits and reports the holder
    worker = subprocess.Popen([sys.executable, "-m", "opsdctl.cli", "worker", "--drain"], cwd=ws, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    status = gpus_doc = None
    waited_from = None
    deadline = time.time() + 40
    while time.time() < deadline:
        status = json.loads(opsdctl(ws, env, "status", "--json").stdout)
        if "waits" in (status["worker"].get("activity") or ""):
            waited_from = waited_from or time.time()
            if time.time() - waited_from >= (WAIT_OBSERVE_S / 2 if args.fake else WAIT_OBSERVE_S):
                break
        time.sleep(0.5)
    gpus_doc = json.loads(opsdctl(ws, env, "gpus", "--json").stdout)
    activity = (status or {}).get("worker", {}).get("activity") or ""
    checks["worker_waited"] = waited_from is not None
    stages_started = sum(len(c.get("stages") or []) for c in (status or {}).get("chains", []))
    checks["no_stage_started_while_held"] = stages_started == 0
    g_doc = next((g for g in gpus_doc["gpus"] if g["index_cuda"] == args.gpu), {"processes": []})
    holders = [(p["pid"], p["used_mib"], p["name"]) for p in g_doc["processes"]]
    big = [h for h in holders if (h[1] or 0) >= 0.8 * hold]
    checks["holder_reported_with_mib"] = bool(big) and str(big[0][0]) in activity and f"{big[0][1]} MiB" in activity
    pid_match = any(h[0] == foreign.pid for h in holders)
    if not pid_match:
        notes.append("NVML lists the holder under another pid (a container pid namespace): the pid shown is the "
                     "host's; its MiB and the wait are what matter here")
    checks["foreign_alive_while_waiting"] = _same(foreign.pid, foreign_ct)
    print(f"waiting: {activity}")

    # 4. the foreign process frees its memory (and keeps running)
    t_release = time.time()
    foreign.stdin.write("free\n")
    foreign.stdin.flush()
    foreign.stdout.readline()
    if args.fake:
        write_fake(fake_file, [])
    try:
        out, _ = worker.communicate(timeout=max(10.0, 100 - (time.time() - t_start)))
    except subprocess.TimeoutExpired:
        worker.kill()
        out, _ = worker.communicate()
        notes.append("the worker did not finish in time")
    final = json.loads(opsdctl(ws, env, "status", "--json", "--all").stdout)
    chain = final["chains"][0]
    checks["chain_succeeded"] = chain["state"] == "succeeded"
    # the store's own timestamp (status shows whole seconds): naive UTC with microseconds
    import sqlite3

    con = sqlite3.connect(ws / "runs.db")
    try:
        first = con.execute("select started_at from stage where chain_id = 1 order by id limit 1").fetchone()
    finally:
        con.close()
    start_delay = None
    if first and first[0]:
        import datetime as dt

        started = dt.datetime.fromisoformat(first[0]).replace(tzinfo=dt.timezone.utc).timestamp()
        start_delay = started - t_release
    checks["stage_started_after_release"] = start_delay is not None and start_delay >= 0
    checks["foreign_never_touched"] = _same(foreign.pid, foreign_ct) and foreign.poll() is None
    devs = {}
    for st in ("train", "eval"):
        f = ws / "runs" / "1" / st / "device.json"
        devs[st] = json.loads(f.read_text()) if f.exists() else None
    want_cvd = str(args.gpu) if os.environ.get("CUDA_VISIBLE_DEVICES") is None else None

    def saw_granted(d) -> bool:
        if d is None or d["order"] != "PCI_BUS_ID" or (want_cvd is not None and d["cvd"] != want_cvd):
            return False
        if args.fake:
            return True
        if d.get("count") != 1:
            return False
        if not d.get("uuid"):
            notes.append("this torch does not report device UUIDs: checked CUDA_VISIBLE_DEVICES and the count only")
            return True
        return d["uuid"].removeprefix("GPU-") == gpu.uuid.removeprefix("GPU-")

    checks["stages_saw_the_granted_gpu"] = all(saw_granted(d) for d in devs.values())

    foreign.stdin.write("exit\n")  # our own process: we end it, politely
    foreign.stdin.flush()
    try:
        foreign.wait(timeout=30)
    except subprocess.TimeoutExpired:
        foreign.kill()

    ok = all(checks.values())
    doc = {
        "ok": ok,
        "mode": "fake" if args.fake else "nvml",
        "device": gpu.name,
        "gpu": {"index_cuda": args.gpu, "uuid": gpu.uuid, "total_mib": gpu.total_mib},
        "foreign": {"pid": foreign.pid, "held_mib": hold, "pid_seen_by_nvml": pid_match},
        "min_free_mib": min_free,
        "reported": {"activity": activity, "holders": holders},
        "checks": checks,
        "stage_start_after_release_s": None if start_delay is None else round(start_delay, 2),
        "stages": {s["name"]: {"state": s["state"], "seconds": s["seconds"], "estimate_seconds": s["estimate_seconds"],
                               "gpus": s["gpus"]} for s in chain.get("stages") or []},
        "stage_devices": devs,
        "worker_log_tail": out.strip().splitlines()[-12:],
        "notes": notes,
        "seconds": round(time.time() - t_start, 1),
    }
    path = args.out or RESULTS / f"gpu_gate_{'fake' if args.fake else slug(gpu.name)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    for k, v in checks.items():
        print(f"  {'PASS' if v else 'FAIL'}  {k}")
    for n in notes:
        print(f"  note: {n}")
    print(f"{'OK' if ok else 'FAILED'} in {doc['seconds']}s; wrote {path}")
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


def _same(pid: int, create_time: float) -> bool:
    import psutil

    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - create_time) < 0.05 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


if __name__ == "__main__":
    sys.exit(main())
