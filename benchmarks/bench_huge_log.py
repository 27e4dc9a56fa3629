"""The worker against a huge stage log: wall time and peak memory of one chain whose train stage
prints MiB of junk (100 KiB lines of letters with ':' and '%|', dict-looking lines) and leaves a
checkpoint, as an external script with no train_result.json would. The worker reads only tail
windows of the log after the stage, so its peak memory should not grow with the log.

    python benchmarks/bench_huge_log.py [--mib 96 1024 2048] [--out benchmarks/results/huge_log.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from conftest import STAGES, clean_env, default_config, opsdctl_argv  # noqa: E402

HUGE_TRAIN = STAGES / "huge_log_train.py"

WRAPPER = textwrap.dedent("""\
    import resource, subprocess, sys, time
    t0 = time.monotonic()
    rc = subprocess.call(sys.argv[1:])
    print("RESULT", rc, time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
""")


def one(mib: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="opsdctl-hugelog-"))
    try:
        shutil.copytree(REPO / "recipes", root / "recipes")
        (root / "opsdctl.toml").write_text(default_config(train=f"{sys.executable} {HUGE_TRAIN} {{stage_dir}} {mib}"))
        subprocess.run([*opsdctl_argv(), "queue", "baseline"], cwd=root, env=clean_env(), check=True, capture_output=True)
        res = subprocess.run([sys.executable, "-c", WRAPPER, *opsdctl_argv(), "worker", "--drain"], cwd=root,
                             env=clean_env(), capture_output=True, text=True)
        rc, seconds, maxrss = res.stdout.rsplit("RESULT", 1)[1].split()
        log = root / "runs" / "1" / "train.log"
        state = subprocess.run([*opsdctl_argv(), "status", "--json"], cwd=root, env=clean_env(), capture_output=True,
                               text=True)
        chain = json.loads(state.stdout)["chains"][0]
        return {"log_mib": round(log.stat().st_size / 2**20, 1), "worker_rc": int(rc), "seconds": round(float(seconds), 1),
                "peak_rss_mib": round(int(maxrss) / 1024, 1), "chain": chain["state"]}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, nargs="+", default=[96, 1024])
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    for mib in args.mib:
        rows.append(one(mib))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
