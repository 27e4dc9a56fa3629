"""How long `compare`, `compare --json`, `advise`, `status` and `opsdctl --help` take as whole
processes, on a session's store (16 finished chains) and on a store of 10,000.

The stores are benchmarks/bench_store_scale.py's (8 variants; each chain with its stages, a score
with 30 per-problem counts at k = 12 and training statistics; one running chain and 5 queued).
Each command runs as a fresh `python -m opsdctl.cli` process, REPEATS times, and the median wall
time is reported with the child's CPU seconds (user + system, which a loaded machine changes far
less than the wall time) and the 1-minute load average before and after. `--tree NAME=PATH` times
another checkout too (e.g. main=/work/main), interleaved with this one run by run so both see the
same load.

Python's compiled bytecode is cached as for an installed package (PYTHONPYCACHEPREFIX in the
benchmark's temporary folder, one untimed run of each command first), whatever the calling shell
says: with PYTHONDONTWRITEBYTECODE=1 every run compiles opsdctl's ~100 modules again (about 0.1 s),
which no user pays. `--no-bytecode-cache` measures that case instead (nothing written).

    python benchmarks/cli_speed.py [--sizes 16,10000] [--repeats 5] [--tree main=../main] [--no-bytecode-cache]

Not a test: the figures depend on the machine and on what else runs on it. Writes
benchmarks/results/cli_speed.json and cli_speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_store_scale import CONFIG, build_store  # noqa: E402

COMMANDS = {"compare": ["compare"], "compare --json": ["compare", "--json"], "advise": ["advise"],
            "status": ["status"], "--help": ["--help"]}
GOALS_S = {16: 0.6, 10000: 1.0}  # compare and advise, whole process (the brief's targets)


def child_env(tree: Path, cwd: Path, pycache: Path | None) -> dict:
    """The environment of a timed command: `tree` first on the path; bytecode cached under
    `pycache`, or neither read from a cache folder of ours nor written (None)."""
    env = {**os.environ, "OPSDCTL_CONFIG": str(cwd / "opsdctl.toml"), "PYTHONPATH": str(tree), "COLUMNS": "100"}
    if pycache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def one_run(tree: Path, args: list[str], cwd: Path, pycache: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `python -m opsdctl.cli ARGS` in `cwd` with `tree` first."""
    env = child_env(tree, cwd, pycache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "opsdctl.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: opsdctl {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_all(trees: dict[str, Path], cwd: Path, repeats: int, pycache: Path | None = None) -> dict:
    """{tree: {command: {median_s, min_s, max_s, cpu_median_s}}}, the trees interleaved run by run
    after one untimed run of each (it writes the bytecode cache and reads the store into the OS's)."""
    walls = {t: {c: [] for c in COMMANDS} for t in trees}
    cpus = {t: {c: [] for c in COMMANDS} for t in trees}
    for args in COMMANDS.values():
        for tree in trees.values():
            one_run(tree, args, cwd, pycache)
    for _ in range(repeats):
        for cmd, args in COMMANDS.items():
            for name, tree in trees.items():
                w, c = one_run(tree, args, cwd, pycache)
                walls[name][cmd].append(w)
                cpus[name][cmd].append(c)
    return {name: {cmd: {"median_s": round(statistics.median(walls[name][cmd]), 3),
                         "min_s": round(min(walls[name][cmd]), 3), "max_s": round(max(walls[name][cmd]), 3),
                         "cpu_median_s": round(statistics.median(cpus[name][cmd]), 3)}
                   for cmd in COMMANDS} for name in trees}


def commit_of(tree: Path) -> str:
    """The tree's git commit (with '+' when it has uncommitted changes), or '?'."""
    try:
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+" if dirty else "")


def markdown(doc: dict) -> str:
    trees = list(doc["trees"])
    lines = ["# CLI speed: whole processes, medians of %d" % doc["repeats"], "",
             "Trees: " + ", ".join(f"{k} = {v['path']} @ {v['commit']}" for k, v in doc["trees"].items()) + ".", "",
             f"Machine: {doc['machine']['cpus']} CPUs, Python {doc['machine']['python']}. Wall seconds "
             "(CPU seconds of the process in brackets); load average (1 min) before -> after each store. "
             + ("Bytecode cached, as for an installed package." if doc.get("bytecode") == "cached" else
                "No bytecode cache (PYTHONDONTWRITEBYTECODE=1: every run compiles opsdctl's modules)."), ""]
    for row in doc["rows"]:
        goal = GOALS_S.get(row["chains"])
        lines += [f"## {row['chains']} finished chains (load {row['load_before']:.2f} -> {row['load_after']:.2f})", "",
                  "| command | " + " | ".join(trees) + " |", "|---|" + "---|" * len(trees)]
        for cmd in COMMANDS:
            cells = [f"{row['times'][t][cmd]['median_s']:.2f} ({row['times'][t][cmd]['cpu_median_s']:.2f})"
                     for t in trees]
            lines.append(f"| `{cmd}` | " + " | ".join(cells) + " |")
        if goal:
            lines += ["", f"Goal for compare and advise: <= {goal:.1f} s."]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,10000")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="another checkout to time beside this one")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile every module on every run, as PYTHONDONTWRITEBYTECODE=1 makes Python do")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "cli_speed.json")
    args = ap.parse_args(argv)
    trees = {"this": REPO}
    for spec in args.tree:
        name, _, path = spec.partition("=")
        trees[name] = Path(path).resolve()
    rows = []
    with tempfile.TemporaryDirectory(prefix="opsdctl-cli-speed-") as tmp:
        for n in [int(x) for x in args.sizes.split(",") if x.strip()]:
            d = Path(tmp) / f"n{n}"
            d.mkdir()
            build_store(d / "runs.db", n)
            (d / "opsdctl.toml").write_text(CONFIG.format(db=d / "runs.db"))
            load_before = os.getloadavg()[0]
            times = time_all(trees, d, args.repeats, None if args.no_bytecode_cache else Path(tmp) / "pycache")
            rows.append({"chains": n, "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                         "times": times})
            for name in trees:
                print(f"{n:>6} chains, {name}: " + ", ".join(f"{c} {v['median_s']:.2f} s ({v['cpu_median_s']:.2f} cpu)"
                                                           for c, v in times[name].items()), flush=True)
    doc = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "repeats": args.repeats, "bytecode": "none" if args.no_bytecode_cache else "cached",
           "trees": {k: {"path": str(v), "commit": commit_of(v)} for k, v in trees.items()}, "goals_s": GOALS_S, "rows": rows,
           "note": "whole `python -m opsdctl.cli` processes at COLUMNS=100; median wall seconds and the process's "
                   "CPU seconds; the stores of benchmarks/bench_store_scale.py"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(doc))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
