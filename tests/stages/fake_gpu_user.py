"""Registers a process as holding GPU memory in a FakeProbe file (opsdctl.daemon.gpu_probe.FakeProbe), the
way a CUDA process shows up in NVML. Used inside a stage command to make the stage's own
processes hold memory: `python fake_gpu_user.py FILE --pid $$ --mib 30000 [--gpu 0]`.
"""

import argparse
import fcntl
import json
import os

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--pid", type=int, default=os.getppid())
p.add_argument("--mib", type=int, default=30000)
p.add_argument("--gpu", type=int, default=0)
args = p.parse_args()
with open(args.file + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(args.file) as f:
        doc = json.load(f)
    doc["gpus"][args.gpu].setdefault("processes", []).append({"pid": args.pid, "used_mib": args.mib})
    tmp = args.file + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, args.file)
