"""The worker's NVML sampler of a stage's GPU use (opsdctl/daemon/gpu_sampler.py) on a real GPU.

    python benchmarks/gpu_stage_usage.py [--gpu 0] [--out PATH]

1. a FOREIGN process (not the stage's) holds FOREIGN_GIB on the same GPU the whole time;
2. a "stage" process allocates STAGE_GIB with torch, then runs bf16 matrix products for
   BUSY_S seconds (utilisation), then idles a little;
3. the sampler, with the real NvmlProbe, watches that GPU with the stage's pids only.
Checks: the peak is the stage's own memory (its tensor plus its CUDA context, as NVML lists it
for the stage's pid), not the foreign process's; utilisation is high while it computes; the
attribution is "processes" (NVML lists the stage's pid) or says "device" where it cannot.
Prints a summary and writes benchmarks/results/gpu_stage_usage_<device>.json (or --out).
Exits 0 when every check passes. Takes well under a minute.
Ran on one H200 (benchmarks/results/gpu_stage_usage_h200.json: every check passed); its CPU
side, with the FakeProbe, is tests/integration/test_gpu_usage.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from opsdctl.daemon.gpu_probe import NvmlProbe  # noqa: E402
from opsdctl.daemon.gpu_sampler import GpuSampler  # noqa: E402

STAGE_GIB = 10
FOREIGN_GIB = 20
BUSY_S = 8.0
INTERVAL_S = 0.5

STAGE = f"""
import time, torch
x = torch.empty({STAGE_GIB} * 2**30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
torch.cuda.synchronize()
print("stage allocated", torch.cuda.memory_allocated() >> 20, "MiB (torch)", flush=True)
end = time.time() + {BUSY_S}
while time.time() < end:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
time.sleep(1.5)
print("stage done; torch max reserved", torch.cuda.max_memory_reserved() >> 20, "MiB", flush=True)
"""

FOREIGN = f"""
import sys, time, torch
x = torch.empty({FOREIGN_GIB} * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("foreign ready", flush=True)
sys.stdin.readline()
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = {"CUDA_VISIBLE_DEVICES": str(args.gpu), "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    probe = NvmlProbe(inherited=None, use_env=False)
    inv = probe.inventory()
    gpu = next(g for g in inv if g.index_cuda == args.gpu)
    print(f"GPU {args.gpu}: {gpu.name}, {gpu.used_mib}/{gpu.total_mib} MiB used, util {gpu.util_pct}%")

    foreign = subprocess.Popen([sys.executable, "-c", FOREIGN], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert "foreign ready" in foreign.stdout.readline()
    leader: list[int] = []
    sampler = GpuSampler(probe, [args.gpu], lambda: set(leader), INTERVAL_S).start()
    t0 = time.time()
    stage = subprocess.Popen([sys.executable, "-c", STAGE], env=env, stdout=subprocess.PIPE, text=True)
    leader.append(stage.pid)
    out, _ = stage.communicate(timeout=120)
    usage = sampler.stop()
    seconds = time.time() - t0
    foreign.stdin.write("\n")
    foreign.stdin.flush()
    foreign.wait(timeout=60)
    print(out.strip())
    print(json.dumps(usage.to_json() if usage else None, indent=1))

    checks = {
        "sampled": usage is not None and usage.samples >= 5,
        "peak is the stage's, not the foreign process's": usage is not None and
            STAGE_GIB * 1024 <= usage.peak_mib < (STAGE_GIB + 4) * 1024,
        "utilisation seen while it computes": usage is not None and usage.util_pct is not None and usage.util_pct >= 40,
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    doc = {"device": gpu.name, "stage_gib": STAGE_GIB, "foreign_gib": FOREIGN_GIB, "busy_s": BUSY_S,
           "interval_s": INTERVAL_S, "stage_seconds": round(seconds, 1), "usage": usage.to_json() if usage else None,
           "stage_output": out.strip().splitlines(), "checks": checks}
    dest = Path(args.out) if args.out else REPO / "benchmarks" / "results" / (
        "gpu_stage_usage_" + gpu.name.split()[-1].lower() + ".json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {dest}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
