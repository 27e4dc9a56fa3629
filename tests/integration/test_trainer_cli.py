"""`python -m trainer` inputs: validated through opsdctl.recipes.knobs, bad input refused in one line with
exit 2 before any model loads; method-knob precedence; budget knobs from the profile only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from opsdctl.errors import UserError
from opsdctl.recipes import knobs
from trainer import cli
from fixtures_tiny import tiny_assets  # noqa: F401,E402  (pytest fixture)



def run_trainer(*args, cwd=REPO, timeout=60):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSD_", "OPSDCTL_"))}
    return subprocess.run([sys.executable, "-m", "trainer", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def recipe_json(path: Path, hparams=None, method=None) -> Path:
    path.write_text(json.dumps({"name": "r", "version": 1, "hash": "h" * 64, "description": "",
                                "hparams": {**knobs.default_hparams(), **(hparams or {})},
                                "method": {**knobs.default_method(), **(method or {})}}))
    return path


@pytest.mark.parametrize("body, words", [
    ("learning_rate=1e-5\nlora_rr=64\n", ["lora_rr", "did you mean lora_r", ":2"]),
    ("lora_r=512\n", ["lora_r", "512", "<= 256"]),
    ("max_steps=50\n", ["max_steps", "budget knob"]),
    ("fixed_teacher=yes\n", ["fixed_teacher", "true or false"]),
])
def test_bad_recipe_env_is_refused_in_one_line(tmp_path, body, words):
    env = tmp_path / "recipe.env"
    env.write_text(body)
    out = tmp_path / "out"
    proc = run_trainer("--profile", "tiny", "--recipe-env", env, "--seed", 1, "--output-dir", out)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(env) in lines[0] and all(w in lines[0] for w in words), lines[0]
    assert not out.exists()  # refused before anything was written or loaded


def test_other_bad_inputs_exit_2_in_one_line(tmp_path):
    cases = [
        ["--profile", "nope", "--recipe", recipe_json(tmp_path / "r.json")],
        ["--profile", "tiny", "--recipe", tmp_path / "missing.json"],
        ["--profile", "tiny", "--recipe", recipe_json(tmp_path / "e.json", {"use_ema_teacher": True})],
        ["--profile", "tiny", "--recipe", recipe_json(tmp_path / "r.json"), "--max-steps", "0"],
        ["--profile", "tiny"],  # neither --recipe nor --recipe-env
    ]
    for extra in cases:
        proc = run_trainer(*extra, "--seed", 1, "--output-dir", tmp_path / "o")
        assert proc.returncode == 2, (extra, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def args(tmp_path, *extra):
    return ["--profile", "tiny", "--seed", "3", "--output-dir", str(tmp_path / "o"), *map(str, extra)]


def test_method_precedence_json_over_toml_over_code_defaults(tmp_path, monkeypatch):
    code_defaults = tmp_path / "code_method_defaults.toml"
    code_defaults.write_text('[method]\nclip_mode = "token"\ndata_select = "nomath"\nteacher_context = "both"\n')
    monkeypatch.setattr(cli, "CODE_METHOD_DEFAULTS", code_defaults)
    flag = tmp_path / "flag.toml"
    flag.write_text('[method]\ndata_select = "hard"\nteacher_context = "trace"\n')
    env = tmp_path / "recipe.env"
    env.write_text("lora_r=8\n")
    cfg = cli.resolve(args(tmp_path, "--recipe-env", env, "--method-defaults", flag))
    assert cfg.method == {**knobs.default_method(), "clip_mode": "token", "data_select": "hard",
                          "teacher_context": "trace"}
    assert cfg.sources["clip_mode"] == str(code_defaults) and cfg.sources["data_select"] == str(flag)
    assert cfg.hparams["lora_r"] == 8 and cfg.hparams["learning_rate"] == knobs.HPARAMS["learning_rate"].default
    rj = recipe_json(tmp_path / "r.json", method={"teacher_context": "solution"})
    with_json = dict(json.loads(rj.read_text()))
    del with_json["method"]["data_select"]  # a JSON that leaves a method knob out falls through
    rj.write_text(json.dumps(with_json))
    cfg = cli.resolve(args(tmp_path, "--recipe", rj, "--method-defaults", flag))
    assert cfg.method["teacher_context"] == "solution" and cfg.method["data_select"] == "hard"
    assert cfg.method["clip_mode"] == "entry"  # the JSON sets it


def test_bad_method_defaults_and_budget_overrides(tmp_path):
    bad = tmp_path / "m.toml"
    bad.write_text('[method]\nclip_mode = "sideways"\n')
    env = tmp_path / "recipe.env"
    env.write_text("")
    with pytest.raises(UserError, match="clip_mode"):
        cli.resolve(args(tmp_path, "--recipe-env", env, "--method-defaults", bad))
    bad.write_text('[method]\nlearning_rate = 1e-5\n')
    with pytest.raises(UserError, match="hyper-parameter"):
        cli.resolve(args(tmp_path, "--recipe-env", env, "--method-defaults", bad))
    cfg = cli.resolve(args(tmp_path, "--recipe-env", env, "--max-steps", 2, "--per-device-batch", 1,
                           "--grad-accum", 3, "--save-steps", 1, "--model", "m", "--dataset", "d.jsonl"))
    p = cfg.profile
    assert (p.max_steps, p.per_device_train_batch_size, p.gradient_accumulation_steps, p.save_steps,
            p.model, p.dataset) == (2, 1, 3, 1, "m", "d.jsonl")


def test_tiny_profile_caps_max_completion_length(tmp_path):
    from opsdctl.recipes.profiles import get_profile

    cap = get_profile("tiny").completion_length_cap
    cfg = cli.resolve(args(tmp_path, "--recipe", recipe_json(tmp_path / "r.json", {"max_completion_length": 4096})))
    assert cfg.max_completion_length == cap < 4096 and any("capped" in n for n in cfg.notes)
    cfg = cli.resolve(args(tmp_path, "--recipe", recipe_json(tmp_path / "r.json", {"max_completion_length": 7})))
    assert cfg.max_completion_length == 7
    big = cli.resolve(["--profile", "qwen3-1.7b", "--seed", "1", "--output-dir", str(tmp_path),
                       "--recipe", str(recipe_json(tmp_path / "r.json", {"max_completion_length": 4096}))])
    assert big.max_completion_length == 4096


def test_reads_the_recipe_json_opsdctl_writes(tmp_path):
    from opsdctl.recipes.load import recipe_json as opsdctl_recipe_json

    hp = {**knobs.default_hparams(), "lora_r": 32, "beta": 0.5}
    doc = opsdctl_recipe_json("token-clip", 2, "d", hp, {**knobs.default_method(), "clip_mode": "token"})
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(doc))
    cfg = cli.resolve(args(tmp_path, "--recipe", path))
    assert cfg.hparams == hp and cfg.method["clip_mode"] == "token"
    assert (cfg.recipe_name, cfg.recipe_hash) == ("token-clip", doc["hash"])


def test_print_prompts_shows_one_row_after_the_chat_template(tmp_path, tiny_assets):  # noqa: F811
    """`python -m trainer --print-prompts --row N --json` on the tiny profile, offline: the user
    messages and the templated texts of row N, for the released recipe or a given one."""
    row = json.loads(tiny_assets.train_file.read_text().splitlines()[3])
    proc = run_trainer("--profile", "tiny", "--print-prompts", "--row", 3, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"student_user", "teacher_user", "student_text", "teacher_text"} <= set(doc)
    assert doc["student_user"] == f"Problem: {row['problem']}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
    assert doc["student_text"].startswith("<|im_start|>user\n" + doc["student_user"] + "<|im_end|>")
    assert row["solution"] in doc["teacher_user"] and doc["teacher_user"] in doc["teacher_text"]
    assert row["solution"] not in doc["student_text"]
    env = tmp_path / "recipe.env"
    env.write_text("teacher_thinking=true\n")
    method = tmp_path / "m.toml"
    method.write_text('[method]\nteacher_context = "trace"\nstudent_prompt = "plain"\n')
    human = run_trainer("--profile", "tiny", "--recipe-env", env, "--method-defaults", method, "--print-prompts",
                        "--row", 3)
    assert human.returncode == 0, human.stderr
    assert "===== teacher text (chat template) =====" in human.stdout and row["COT_Reason"] in human.stdout
    assert "teacher_thinking=true" in human.stdout and "<think>\n\n</think>" in human.stdout  # the student's
    for bad in (["--row", 10**6], ["--row", -1]):
        proc = run_trainer("--profile", "tiny", "--print-prompts", *bad)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "--row" in proc.stderr


def test_training_still_needs_a_recipe_a_seed_and_an_output_dir(tmp_path):
    proc = run_trainer("--profile", "tiny", "--recipe-env", tmp_path / "r.env")
    assert proc.returncode == 2 and "--seed" in proc.stderr and "--output-dir" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
