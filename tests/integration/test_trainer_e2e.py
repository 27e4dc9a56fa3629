"""`python -m trainer` as a real subprocess on the tiny profile: a few optimizer steps with finite
loss, every output file, adapters that reload (PEFT and opsdkit's merge); and two processes
with `accelerate launch --cpu` (gloo)."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO
from fixtures_tiny import untrained_tiny_model  # noqa: F401  (pytest fixture)

from opsdctl.recipes import knobs
from opsdctl.recipes.profiles import get_profile

STEP_KEYS = {"step", "loss", "grad_norm", "learning_rate", "kl", "frac_clipped", "completion_length",
             "rollout_seconds", "step_seconds", "tokens_per_second", "peak_memory_mib",
             "rollout_peak_memory_mib", "train_peak_memory_mib", "memory_source", "on_policy"}


def env(threads: int = 1) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("OPSD_", "OPSDCTL_"))}
    e.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1",
             TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    if "OPSDCTL_CACHE_DIR" in os.environ:
        e["OPSDCTL_CACHE_DIR"] = os.environ["OPSDCTL_CACHE_DIR"]
    return e


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    from opsdkit.tiny import make_rows

    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in make_rows(40, seed=9)))
    return path


def recipe_env(path: Path, **over) -> Path:
    hp = {**knobs.default_hparams(), "max_completion_length": 8, "learning_rate": 1e-3,
          "lr_scheduler_type": "cosine", "lora_r": 8, "lora_alpha": 16, **over}
    path.write_text(knobs.format_recipe_env(hp, ["test recipe"]))
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hf_lines(stdout: str) -> list[dict]:
    return [ast.literal_eval(line) for line in stdout.splitlines() if line.startswith("{'")]


@pytest.mark.slow
def test_end_to_end_subprocess(tmp_path, untrained_tiny_model, data_file):  # noqa: F811
    out = tmp_path / "run"
    method = tmp_path / "method.toml"
    method.write_text('[method]\nclip_mode = "token"\n')
    cmd = [sys.executable, "-m", "trainer", "--profile", "tiny", "--recipe-env", str(recipe_env(tmp_path / "r.env")),
           "--method-defaults", str(method), "--seed", "4", "--output-dir", str(out),
           "--model", str(untrained_tiny_model), "--dataset", str(data_file),
           "--max-steps", "3", "--per-device-batch", "2", "--grad-accum", "2", "--save-steps", "2"]
    proc = subprocess.run(cmd, cwd=REPO, env=env(2), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(set(m) == STEP_KEYS for m in metrics)
    assert all(math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["kl"] >= 0 for m in metrics)
    assert all(0 < m["completion_length"] <= 8 and m["tokens_per_second"] > 0 for m in metrics)
    from trainer.optim import lr_curve

    hp = knobs.parse_recipe_env((tmp_path / "r.env").read_text(), "r.env")
    # the effective rate: the recipe's, times the tiny profile's learning_rate_scale
    hp = {**knobs.default_hparams(), **hp}
    hp["learning_rate"] *= get_profile("tiny").learning_rate_scale
    assert [m["learning_rate"] for m in metrics] == pytest.approx(lr_curve(hp, 3))
    progress = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines()]
    assert progress[-1] == {"step": 3, "max_steps": 3}

    lines = hf_lines(proc.stdout)
    assert [set(d) for d in lines[:3]] == [{"loss", "grad_norm", "learning_rate", "on_policy_loss", "epoch"}] * 3
    assert {"train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss",
            "epoch"} == set(lines[-1])
    assert "generation done - elapsed time:" in proc.stdout
    # what opsdctl's effective-config check reads: the [modes] line and the dict lines' rates
    assert "[modes] teacher_thinking=False student_thinking=False" in proc.stdout
    from opsdctl.run.effective_config import check_log

    asked = {**knobs.default_hparams(), **knobs.parse_recipe_env((tmp_path / "r.env").read_text(), "r.env")}
    check = check_log(proc.stdout, asked, {}, max_steps=3, lr_scale=get_profile("tiny").learning_rate_scale)
    assert check.status == "verified", check.to_dict()
    assert {c["knob"] for c in check.checked} == {"learning_rate", "schedule", "teacher_thinking", "student_thinking"}

    result = json.loads((out / "train_result.json").read_text())
    assert result["steps"] == 3 and math.isfinite(result["final_loss"])
    assert result["rows_total"] == result["rows_selected"] == 40 and result["max_completion_length"] == 8
    for key in ("mean_kl", "frac_clipped", "step_seconds", "rollout_seconds", "peak_memory_mib", "train_runtime"):
        assert result[key] is not None
    startup = result["startup_seconds"]  # process start to the first step, phase by phase
    assert startup["imports"] > 0 and startup["since_process_start"] >= startup["imports"] + startup["models"]
    assert set(startup) == {"imports", "accelerate_and_data", "models", "rollout_engine", "since_process_start"}
    assert re.search(r"startup: imports [0-9.]+ s, accelerate and data [0-9.]+ s, models [0-9.]+ s", proc.stdout)
    config = json.loads((out / "train_config.json").read_text())
    assert config["method"]["clip_mode"] == "token" and config["sources"]["clip_mode"] == str(method)

    # checkpoints at save_steps, at max_steps and final; no temporary directories left behind
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["checkpoint-2", "checkpoint-3", "checkpoint-final"]
    final = out / "checkpoint-final"
    cfg = json.loads((final / "adapter_config.json").read_text())
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16
    assert (final / "adapter_model.safetensors").read_bytes() == (out / "checkpoint-3" / "adapter_model.safetensors").read_bytes()

    # the adapter reloads with PEFT, and opsdkit's out-of-place merge gives the same model
    from peft import PeftModel

    from opsdkit.modeling import load_model, merge_adapter_into

    torch.set_num_threads(1)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    base = load_model(str(untrained_tiny_model))
    with torch.no_grad():
        plain = base(input_ids=ids).logits
    peft_model = PeftModel.from_pretrained(base, str(final))
    with torch.no_grad():
        adapted = peft_model(input_ids=ids).logits
    merged = load_model(str(untrained_tiny_model))
    assert merge_adapter_into(merged, final) == 7 * merged.config.num_hidden_layers
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(adapted, plain)  # training moved the adapter


@pytest.mark.slow
def test_two_processes_gloo(tmp_path, untrained_tiny_model, data_file):  # noqa: F811
    # `accelerate launch --cpu` spawns one process unless MPI is set up; torchrun is the launcher
    # `accelerate launch --multi_gpu` uses underneath, and Accelerator() reads its environment (gloo on CPU).
    out = tmp_path / "run2"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "trainer", "--profile", "tiny", "--recipe-env", str(recipe_env(tmp_path / "r.env")),
           "--seed", "5", "--output-dir", str(out), "--model", str(untrained_tiny_model), "--dataset", str(data_file),
           "--max-steps", "2", "--per-device-batch", "1", "--grad-accum", "2", "--save-steps", "2"]
    proc = subprocess.run(cmd, cwd=REPO, env=env(1), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "train_result.json").read_text())
    assert result["num_processes"] == 2 and result["steps"] == 2 and math.isfinite(result["final_loss"])
    assert result["replicas_in_sync"] is True
    lines = hf_lines(proc.stdout)
    assert len([d for d in lines if "loss" in d]) == 2  # rank 0 alone logs
    assert (out / "checkpoint-final" / "adapter_model.safetensors").exists()
    # batch and accumulation given on the command line are taken as they are: 1 x 2 x 2 processes
    # = 4 rows per step over 40 rows, epoch 0.2 after 2 steps
    assert (result["gradient_accumulation_steps"], result["global_batch"]) == (2, 4)
    assert lines[-1]["epoch"] == 0.2


@pytest.mark.slow
def test_benchmark_smoke_mode(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_trainer
    finally:
        sys.path.pop(0)
    out = tmp_path / "bench.json"
    n = torch.get_num_threads()
    try:
        assert bench_trainer.main(["--smoke", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(n)
    res = json.loads(out.read_text())
    assert res["device"] == "cpu-smoke" and len(res["steps"]) == 1 and res["loss_only"]["same_loss"]
    assert res["steps"][0]["completion_length"] == 12  # forced full length
    assert res["micro_step"]["naive"]["seconds"] > 0 and res["micro_step"]["chunked"]["seconds"] > 0
