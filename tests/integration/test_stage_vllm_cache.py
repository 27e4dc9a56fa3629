"""Every stage of a session shares one vLLM compile cache (VLLM_CACHE_ROOT under runs_dir),
unless the user set VLLM_CACHE_ROOT: then theirs is kept. Real worker, stand-in stages."""

from __future__ import annotations

import sys

from conftest import FAKE_EVAL, FAKE_TRAIN, default_config

from opsdctl.run import stages


def _echo_ws(ws):
    py = sys.executable
    ws.write_config(default_config(
        train=f"echo CACHE=$VLLM_CACHE_ROOT && {py} {FAKE_TRAIN} --recipe {{recipe_json}} --seed {{seed}} "
              f"--output-dir {{stage_dir}}",
        eval=f"echo CACHE=$VLLM_CACHE_ROOT && {py} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}"))


def _cache_lines(ws, chain: int) -> list[str]:
    return [line.split("=", 1)[1] for stage in ("train", "eval")
            for line in (ws.runs / str(chain) / f"{stage}.log").read_text().splitlines() if line.startswith("CACHE=")]


def test_every_stage_of_every_chain_gets_the_same_cache_under_runs_dir(ws):
    _echo_ws(ws)
    ws.cli("queue", "baseline", "--repeats", "2")
    ws.run("worker", "--drain")
    want = str((ws.runs / stages.VLLM_CACHE_DIR).resolve())
    assert _cache_lines(ws, 1) == [want, want]
    assert _cache_lines(ws, 2) == [want, want]


def test_a_cache_root_the_user_set_wins(ws, tmp_path):
    _echo_ws(ws)
    mine = str(tmp_path / "my-vllm-cache")
    ws.env["VLLM_CACHE_ROOT"] = mine
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    assert _cache_lines(ws, 1) == [mine, mine]
