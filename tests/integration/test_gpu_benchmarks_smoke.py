"""The GPU benchmark scripts' CPU paths (tiny model, HF generate): every sub-command of
gpu_throughput.py, then combine; and gpu_main_job.py's chain through today's worker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO


def run(*args, timeout=600):
    return subprocess.run([sys.executable, *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_throughput_smoke_runs_every_part_and_combines(tmp_path):
    out = tmp_path / "out"
    proc = run(REPO / "benchmarks" / "gpu_throughput.py", "smoke", "--out-dir", out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names = {p.name for p in out.glob("*.json")}
    assert {"train_4x2-share.json", "train_1x4x8.json", "train_2proc.json", "eval_calibrate.json",
            "eval_validate.json", "throughput_cpu-smoke.json"} <= names
    doc = json.loads((out / "throughput_cpu-smoke.json").read_text())
    assert doc["gpu"] == "cpu-smoke" and doc["smoke"] is True and doc["layouts_missing"] == []
    assert set(doc["chains_per_6h"]) == {"1", "2", "4"}
    by = {x["gpus_per_chain"]: x for x in doc["layouts"]}
    assert by[2]["train_source"].startswith("interpolated") and by[1]["train_source"] == "measured"
    for x in by.values():
        # both figures are rounded to 0.01 on their own: the product carries g x 0.005 of the wall's
        rounding = 0.005 * (x["gpus_per_chain"] + 1) + 1e-9
        assert x["chain_gpu_min"] == pytest.approx(x["gpus_per_chain"] * x["chain_wall_min"], abs=rounding)
        assert x["concurrent_chains"] * x["gpus_per_chain"] == 4
    # measured and predicted apart: the eval model's checks name what was measured
    val = doc["eval"]["validation"]
    assert {"scaled_share", "scaled_full", "real_lengths_cut_short"} <= set(val)
    assert all("measured_wall_s" in val[k] and "error" in val[k] for k in ("scaled_share", "scaled_full"))
    assert set(doc["eval"]["predicted"]["generation_by_gpus"]) == {"1", "2", "4"}
    two = doc["train"]["2proc"]
    assert two["ok"] and two["concurrent"]["seconds_per_32_rows"] > 0 and len(two["ranks"]) == 2
    assert all(r["host"]["stepping"]["peak_rss_mib"] > 0 for r in two["ranks"])
    part = json.loads((out / "train_1x4x8.json").read_text())
    assert part["rows_per_step_per_process"] == 2 * 8 and part["ranks"][0]["steps_done"] == 3


@pytest.mark.slow
def test_main_job_smoke_runs_a_chain_through_todays_worker(tmp_path):
    proc = run(REPO / "benchmarks" / "gpu_main_job.py", "--smoke", "--out-dir", tmp_path / "out",
               "--work", tmp_path / "work")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "main_job.json").read_text())
    assert doc["chain"]["chain_state"] == "succeeded" and doc["eval_one_gpu"]["all_identical"] is True
