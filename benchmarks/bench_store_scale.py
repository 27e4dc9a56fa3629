"""`opsdctl status` and `opsdctl compare --json` as whole processes on stores of many chains, and
the pages of `opsdctl serve` (HTML and ?format=json) beside them, on the same stores.

Builds SQLite stores of 100 / 1,000 / 10,000 finished chains (8 variants; each chain with its
train and eval stages, a score with 30 per-problem counts at k = 12, training statistics with a
100-step curve), plus a running chain and 5 queued ones, then times each command as a fresh
process (the installed `opsdctl` entry point, what a user types) several times and reports the median;
then starts `opsdctl serve` on the store and times each page's request (session, compare, a variant,
a chain; the HTML and its ?format=json twin) the same number of times.

    python benchmarks/bench_store_scale.py [--sizes 100,1000,10000] [--repeats 7] [--out FILE]

Not a test: the figures depend on the machine and on what else runs on it. Prints a table and
writes benchmarks/results/store_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("baseline", "token-clip", "cosine", "hard-data", "left-pad", "long-trace", "lr-1e-5", "ema")
N_PROBLEMS, K = 30, 12
BASE = 54.22


def build_store(path: Path, n_chains: int, seed: int = 0) -> None:
    """A store at `path` with n_chains succeeded chains (+1 running, +5 queued), written in bulk."""
    import numpy as np
    from sqlalchemy import insert

    sys.path.insert(0, str(REPO))
    from opsdctl.store.engine import Store
    from opsdctl.store.models import Chain, Score, Stage, TrainStats, Variant, compact_counts, utcnow

    rng = np.random.default_rng(seed)
    store = Store(f"sqlite:///{path}")
    store.ensure_schema()
    now = utcnow()
    t0 = now - timedelta(minutes=45 * (n_chains + 1))
    with store.write() as s:
        s.execute(insert(Variant), [
            {"id": i + 1, "name": name, "version": 1, "hash": f"h{i:02d}" * 8, "description": name,
             "hparams": {"learning_rate": 5e-6, "max_completion_length": 1024, "lora_r": 64},
             "method": {"clip_mode": "token" if i % 2 else "entry"}, "source": f"recipes/{name}.toml",
             "created_at": t0}
            for i, name in enumerate(VARIANTS)])
        chains, stages, scores, stats = [], [], [], []
        effects = rng.normal(0.0, 1.5, len(VARIANTS))
        for cid in range(1, n_chains + 1):
            vid = (cid - 1) % len(VARIANTS) + 1
            start = t0 + timedelta(minutes=45 * (cid - 1))
            tr, ev = float(rng.uniform(16, 19) * 60), float(rng.uniform(22, 27) * 60)
            end = start + timedelta(seconds=tr + ev)
            chains.append({"id": cid, "variant_id": vid, "seed": cid, "repeat": cid // len(VARIANTS), "seq": cid,
                           "state": "succeeded", "stage": "eval", "profile": "qwen3-1.7b", "queued_at": start,
                           "started_at": start, "finished_at": end})
            for name, secs, st in (("train", tr, start), ("eval", ev, start + timedelta(seconds=tr))):
                stages.append({"chain_id": cid, "name": name, "state": "succeeded", "command": f"bash {name}.sh",
                               "started_at": st, "finished_at": st + timedelta(seconds=secs), "exit_code": 0,
                               "seconds": secs, "estimate_seconds": secs * 1.05,
                               "log_path": f"runs/{cid}/{name}.log", "stage_dir": f"runs/{cid}/{name}",
                               "progress": {"done": 360, "total": 360} if name == "eval" else {"step": 100, "max_steps": 100}})
            u = BASE + effects[vid - 1] + rng.normal(0, 1.0)
            p = np.full(N_PROBLEMS, min(max(u / 100.0, 0.01), 0.99))
            counts = rng.binomial(K, p)
            problems = [{"id": f"2024-{i}", "correct": int(c), "samples": K, "mean_tokens": 9000.0}
                        for i, c in enumerate(counts)]
            compact, pset = compact_counts(problems)  # what the ORM fills on insert (bulk inserts bypass it)
            scores.append({"chain_id": cid, "k": K, "avg_at_k": float(100 * counts.sum() / (N_PROBLEMS * K)),
                           "n_problems": N_PROBLEMS, "n_correct": int(counts.sum()), "n_samples": N_PROBLEMS * K,
                           "problems": problems, "counts": compact, "problem_set": pset,
                           "partial": False, "seconds": ev, "source": "result.json", "created_at": end})
            stats.append({"chain_id": cid, "steps": 100, "final_loss": -0.008, "mean_kl": 0.09, "frac_clipped": 0.35,
                          "step_seconds": 9.1, "rollout_seconds": 3.7, "train_runtime": tr,
                          "curve": [{"step": i, "loss": -0.002, "grad_norm": 0.05} for i in range(1, 101)],
                          "source": "log"})
        extra = [{"id": n_chains + 1, "variant_id": 2, "seed": 0, "repeat": 999, "seq": n_chains + 1, "state": "running",
                  "stage": "train", "profile": "qwen3-1.7b", "queued_at": now, "started_at": now}]
        extra += [{"id": n_chains + 2 + i, "variant_id": 3 + i, "seed": 0, "repeat": 999, "seq": n_chains + 2 + i,
                   "state": "queued", "profile": "qwen3-1.7b", "queued_at": now} for i in range(5)]
        s.execute(insert(Chain), chains + extra)
        stages.append({"chain_id": n_chains + 1, "name": "train", "state": "running", "command": "bash train.sh",
                       "started_at": now, "log_path": "x.log", "stage_dir": "x"})
        s.execute(insert(Stage), stages)
        s.execute(insert(Score), scores)
        s.execute(insert(TrainStats), stats)
    store.dispose()


CONFIG = """profile = "qwen3-1.7b"
db = "sqlite:///{db}"
runs_dir = "runs"
[budget]
hours = 6
[gpus]
devices = []
[baseline]
variant = "baseline"
reference = {{ mean = 54.22, sd = 1.48, n = 5 }}
"""


# the installed entry point (what a user types), else the CLI module
_SCRIPT = Path(sys.executable).parent / "opsdctl"
OPSDCTL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "opsdctl.cli"]


def time_command(args: list[str], cwd: Path, repeats: int) -> dict:
    env = {**os.environ, "OPSDCTL_CONFIG": str(cwd / "opsdctl.toml"), "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = subprocess.run([*OPSDCTL, *args], cwd=cwd, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t)
        if out.returncode != 0:
            raise SystemExit(f"opsdctl {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return {"median_s": round(statistics.median(times), 3), "min_s": round(min(times), 3),
            "max_s": round(max(times), 3), "runs": len(times)}


PAGES = {"session": "/", "compare": "/compare", "variant": "/variant/baseline", "chain": "/chain/1"}


def time_pages(cwd: Path, repeats: int) -> dict:
    """Median seconds of each dashboard page (HTML and JSON) from a running `opsdctl serve`."""
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "OPSDCTL_CONFIG": str(cwd / "opsdctl.toml"), "PYTHONPATH": str(REPO)}
    server = subprocess.Popen([*OPSDCTL, "serve", "--port", str(port)], cwd=cwd, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/changes", timeout=5).read()
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(f"opsdctl serve failed: {server.stderr.read()[-400:]}")
                time.sleep(0.1)
        out = {}
        for name, path in PAGES.items():
            for suffix, key in (("", name), ("?format=json", f"{name}_json")):
                times, size = [], 0
                for _ in range(repeats):
                    t = time.perf_counter()
                    with urllib.request.urlopen(base + path + suffix, timeout=120) as r:
                        size = len(r.read())
                    times.append(time.perf_counter() - t)
                out[key] = {"median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
                            "first_s": round(times[0], 3), "bytes": size, "runs": len(times)}
        return out
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "store_scale.json")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="opsdctl-scale-") as tmp:
        for n in sizes:
            d = Path(tmp) / f"n{n}"
            d.mkdir()
            t = time.perf_counter()
            build_store(d / "runs.db", n)
            built = time.perf_counter() - t
            (d / "opsdctl.toml").write_text(CONFIG.format(db=d / "runs.db"))
            row = {"chains": n, "build_s": round(built, 1),
                   "status": time_command(["status"], d, args.repeats),
                   "status_json": time_command(["status", "--json"], d, args.repeats),
                   "compare_json": time_command(["compare", "--json"], d, args.repeats),
                   "compare": time_command(["compare"], d, args.repeats),
                   "serve_pages": time_pages(d, args.repeats)}
            rows.append(row)
            print(f"{n:>6} chains: status {row['status']['median_s']:.2f} s, status --json "
                  f"{row['status_json']['median_s']:.2f} s, compare {row['compare']['median_s']:.2f} s, "
                  f"compare --json {row['compare_json']['median_s']:.2f} s (medians of {args.repeats})", flush=True)
            print("        serve pages: " + ", ".join(f"{k} {v['median_s']:.2f} s" for k, v in row["serve_pages"].items()),
                  flush=True)
        base = time_command(["--help"], Path(tmp), args.repeats)
    doc = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                       "loadavg_1m_at_end": round(os.getloadavg()[0], 2)},
           "opsdctl_help_s": base, "rows": rows,
           "note": "whole processes (the opsdctl entry point), medians of the repeats; SQLite store; serve_pages: "
                   "one request each to a running `opsdctl serve` (HTML, and _json for ?format=json)"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"`opsdctl --help` start-up: {base['median_s']:.2f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
