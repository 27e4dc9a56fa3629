"""The stage environment places VLLM_CACHE_ROOT under runs_dir, unless the worker's environment set
it."""

from __future__ import annotations

from opsdctl.run import stages


def test_stage_env_places_the_cache(tmp_path):
    common = dict(hparams={}, method={}, chain_id=1, stage="train", stage_dir=tmp_path, run_dir=tmp_path,
                  token="t", gpus=(0,), code_dir=tmp_path)
    env = stages.stage_env(**common, runs_dir=tmp_path / "runs", base={})
    assert env["VLLM_CACHE_ROOT"] == str((tmp_path / "runs" / "vllm-cache").resolve())
    assert stages.stage_env(**common, runs_dir=tmp_path, base={"VLLM_CACHE_ROOT": "/x"})["VLLM_CACHE_ROOT"] == "/x"
    assert "VLLM_CACHE_ROOT" not in stages.stage_env(**common, base={})  # no runs_dir: nothing placed
