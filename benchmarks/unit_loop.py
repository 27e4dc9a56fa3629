"""The inner loop's cost: `python -m pytest tests/unit` as a whole process, its wall time and the
CPU seconds it and its xdist workers used, with the machine's load average beside each figure
(on a shared 2-core machine the wall time follows the load; the CPU seconds hardly do).

    python benchmarks/unit_loop.py [--repeats 1] [--out benchmarks/results/unit_loop.json] [PYTEST_ARGS...]

Each run also lists the test files that used the most CPU (a small plugin times every test in
the workers), so a file that grows slow shows up here before the loop crosses its budget: the
unit loop is meant to stay under a minute on two cores, also under load (DEVELOPERS.md "Tests").
Not a test: the figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLUGIN = '''
import json, os, time
import pytest
_rows = {}
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0 = time.process_time()
    yield
    f = item.nodeid.split("::")[0]
    _rows[f] = _rows.get(f, 0.0) + time.process_time() - c0
def pytest_sessionfinish(session, exitstatus):
    out = os.environ["UNIT_LOOP_CPU_DIR"]
    with open(os.path.join(out, f"{os.getpid()}.json"), "w") as fh:
        json.dump(_rows, fh)
'''


def one_run(extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "unit_loop_cpu.py").write_text(PLUGIN)
        env = {**os.environ, "UNIT_LOOP_CPU_DIR": tmp,
               "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load0 = os.getloadavg()
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/unit", "-q", "-p", "no:randomly",
                               "-p", "unit_loop_cpu", *extra], cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        per_file: dict[str, float] = {}
        for f in Path(tmp).glob("[0-9]*.json"):
            for name, cpu in json.loads(f.read_text()).items():
                per_file[name] = per_file.get(name, 0.0) + cpu
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {"rc": proc.returncode, "summary": tail, "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
            "tests_cpu_s": round(sum(per_file.values()), 1), "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "slowest_files": sorted(([round(c, 2), f] for f, c in per_file.items()), reverse=True)[:12]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "unit_loop.json")
    args, extra = p.parse_known_args()
    runs = []
    for i in range(args.repeats):
        r = one_run(extra)
        runs.append(r)
        print(f"run {i + 1}: {r['summary']}; wall {r['wall_s']} s, CPU {r['cpu_s']} s (tests {r['tests_cpu_s']} s); "
              f"load {r['load_before'][0]} -> {r['load_after'][0]}", flush=True)
        for cpu, name in r["slowest_files"][:6]:
            print(f"    {cpu:6.2f} s CPU  {name}")
    doc = {"command": "python -m pytest tests/unit -q -p no:randomly " + " ".join(extra),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
           "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
