"""`python -m eval` argument checks that need no model: without a profile, --model and --benchmark
are required."""

from __future__ import annotations


def test_without_profile_model_and_benchmark_are_required(tmp_path, capsys):
    from eval.cli import main

    rc = main(["--output-dir", str(tmp_path / "x"), "--gpus", ""])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--model" in err[0]
