"""Stage command templates refused with a reason, and the environment a stage gets."""

from __future__ import annotations

import os

import pytest

from opsdctl.errors import UserError
from opsdctl.daemon import stages


@pytest.mark.parametrize("template, needle", [
    ("x {seeed}", "did you mean {seed}"),
    ("x {checkpoint}", "only known in the eval stage"),
    ("x { y", "stray '{'"),
    ("x }", "stray '}'"),
    ("awk '{print $1}'", "not a placeholder"),
])
def test_template_errors(template, needle):
    with pytest.raises(UserError, match=".") as exc:
        stages.check_template(template, stages.STAGE_PLACEHOLDERS["train"], "cfg")
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_stage_env(tmp_path):
    env = stages.stage_env(
        hparams={"lora_r": 8, "fixed_teacher": True}, method={"clip_mode": "token"}, chain_id=7, stage="eval",
        stage_dir=tmp_path / "s", run_dir=tmp_path, token="tok", gpus=(), code_dir=tmp_path / "code",
        base={"PYTHONPATH": "/old", "PATH": "/bin"},
    )
    assert env["OPSD_LORA_R"] == "8" and env["OPSD_FIXED_TEACHER"] == "true" and env["OPSD_CLIP_MODE"] == "token"
    assert env["OPSDCTL_CHAIN_ID"] == "7" and env["OPSDCTL_STAGE_DIR"] == str(tmp_path / "s")
    assert env["OPSDCTL_STAGE_TOKEN"] == "tok" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["PYTHONPATH"] == f"{tmp_path / 'code'}{os.pathsep}/old"
    env = stages.stage_env(hparams={}, method={}, chain_id=1, stage="train", stage_dir=tmp_path, run_dir=tmp_path,
                           token="t", gpus=(2, 3), code_dir=tmp_path, base={})
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["PYTHONPATH"] == str(tmp_path)


def test_only_a_re_evaluations_eval_stage_gets_its_draw(tmp_path):
    """A chain with eval_draw 2 gets OPSD_EVAL_DRAW=2 in its eval stage, the stage environment as
    LocalExecutor._launch builds it (stage_env, then eval_request.apply_env for the eval); a draw-0
    chain's eval and every train stage get none, even with one in the worker's own environment."""
    from opsdctl.contract import eval_request
    from opsdctl.store.models import Chain

    def env_of(chain: Chain, stage: str) -> dict:
        env = stages.stage_env(hparams={}, method={}, chain_id=1, stage=stage, stage_dir=tmp_path, run_dir=tmp_path,
                               token="t", gpus=(), code_dir=tmp_path, base={"OPSD_EVAL_DRAW": "5", "PATH": "/bin"})
        return eval_request.apply_env(env, chain) if stage == "eval" else env

    redraw, first = Chain(variant_id=1, profile="tiny", eval_draw=2), Chain(variant_id=1, profile="tiny")
    assert env_of(redraw, "eval")["OPSD_EVAL_DRAW"] == "2"
    assert "OPSD_EVAL_DRAW" not in env_of(first, "eval")
    assert "OPSD_EVAL_DRAW" not in env_of(redraw, "train") and "OPSD_EVAL_DRAW" not in env_of(first, "train")
    assert env_of(redraw, "eval")["PATH"] == "/bin"


def test_grad_accum_keeps_the_global_batch_on_the_chains_gpus():
    """{grad_accum} = global batch / (per-device rows x GPUs): the official 32 = 4 x 4 x 2 gives 8 on
    one GPU, 4 on two, 2 on four; a count that does not divide is one line naming the ones that do."""
    assert [stages.grad_accum(32, 4, n) for n in (1, 2, 4, 8)] == [8, 4, 2, 1]
    for n in (3, 5, 0):
        with pytest.raises(UserError) as exc:
            stages.grad_accum(32, 4, n)
        line = str(exc.value)
        assert "{grad_accum}" in line and "1, 2, 4, 8 GPUs" in line and "\n" not in line
    from opsdctl.recipes.profiles import get_profile

    assert get_profile("qwen3-1.7b").global_batch == 32
    assert stages.layout_values("x --grad-accum {grad_accum}", "qwen3-1.7b", 1) == {"grad_accum": 8}
    assert stages.layout_values("x --num-processes {num_gpus}", "qwen3-1.7b", 3) == {}  # not used: not asked
    assert stages.layout_values("x {{grad_accum}}", "qwen3-1.7b", 3) == {}  # a literal brace pair
    with pytest.raises(UserError, match="does not split over 3 GPU"):
        stages.layout_values("x {grad_accum}", "qwen3-1.7b", 3)
    assert stages.render("run --ga {grad_accum}", {"grad_accum": 4}) == "run --ga 4"


def test_grad_accum_is_a_train_stage_placeholder():
    stages.check_template("x --ga {grad_accum}", stages.STAGE_PLACEHOLDERS["train"], "cfg")
    with pytest.raises(UserError, match="only known in the train stage"):
        stages.check_template("x --ga {grad_accum}", stages.STAGE_PLACEHOLDERS["eval"], "cfg")
