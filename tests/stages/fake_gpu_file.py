"""What a stage does to a FakeProbe file (opsdctl.daemon.gpu_probe.FakeProbe) as it uses a GPU, the way
NVML would show it: `use(...)` lists this process with `mib` MiB (or, with as_device=True, adds
the memory to the device without listing any process, as NVML does inside some containers) and
sets the device's utilisation; `release()` undoes it. Used by fake_train.py and fake_eval.py
through FAKE_GPU_FILE, FAKE_GPU_MIB, FAKE_GPU_UTIL and FAKE_GPU_AS=device.
"""

import fcntl
import json
import os

_held = {"mib": 0}


def _edit(path: str, fn) -> None:
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path) as f:
            doc = json.load(f)
        fn(doc)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)


def use(path: str, mib: int, util: int, gpu: int = 0, as_device: bool = False) -> None:
    def fn(doc):
        g = doc["gpus"][gpu]
        if as_device:
            g["base_used_mib"] = int(g.get("base_used_mib", 0)) - _held["mib"] + mib
        else:
            procs = [p for p in g.get("processes", []) if p["pid"] != os.getpid()]
            g["processes"] = procs + [{"pid": os.getpid(), "used_mib": mib, "name": "python"}]
        g["util_pct"] = util
    _edit(path, fn)
    _held["mib"] = mib


def release(path: str, gpu: int = 0, as_device: bool = False) -> None:
    def fn(doc):
        g = doc["gpus"][gpu]
        if as_device:
            g["base_used_mib"] = int(g.get("base_used_mib", 0)) - _held["mib"]
        g["processes"] = [p for p in g.get("processes", []) if p["pid"] != os.getpid()]
        g["util_pct"] = 0
    _edit(path, fn)
    _held["mib"] = 0
