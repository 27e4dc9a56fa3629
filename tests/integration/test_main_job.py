"""The main job end to end with the real workloads: queue -> worker -> compare -> export, on the
tiny profile (real trainer, real evaluator, real SQLite store), sized for CI."""

from __future__ import annotations

import json

import pytest
from fixtures_tiny import tiny_assets  # noqa: F401  (pytest fixture)

from opsdctl.recipes import knobs


@pytest.mark.slow
def test_queue_worker_compare_export_with_the_real_workloads(ws, tiny_assets, tmp_path):  # noqa: F811
    bench = tmp_path / "bench10.jsonl"
    rows = tiny_assets.bench_file.read_text().splitlines()[:10]
    bench.write_text("\n".join(rows) + "\n")
    ws.cli("init", "--profile", "tiny", "--force")
    cfg = (ws.root / "opsdctl.toml").read_text()
    cfg = cfg.replace("--output-dir {stage_dir}\"", "--output-dir {stage_dir} --max-steps 2\"", 1)
    cfg = cfg.replace("--gpus {gpus}", f"--gpus {{gpus}} --benchmark {bench} --num-problems 10")  # the later flag wins
    cfg = cfg.replace("snapshot_code = true ", "snapshot_code = false")
    (ws.root / "opsdctl.toml").write_text(cfg)

    queued = ws.json("queue", "baseline", "--repeats", "2")
    queued += ws.json("queue", "token-clip")
    assert len(queued) == 3
    out = ws.run("worker", "--drain", timeout=900)
    assert "drained" in out.stdout

    chains = ws.chains()
    assert [c["state"] for c in chains.values()] == ["succeeded"] * 3, ws.run("status").stdout
    # our evaluator is pre-started by default: it imported while training ran, then got its go
    for cid in chains:
        log = (ws.runs / str(cid) / "eval.log").read_text()
        assert "started ahead of the train stage's end" in log and "go after" in log and "no go" not in log, log[-2000:]
    # the trainer's statistics and the evaluator's per-problem counts reached the store
    stats = ws.sql("select steps, final_loss, mean_kl from train_stats order by chain_id")
    assert all(steps == 2 and loss is not None and kl is not None and kl >= 0 for steps, loss, kl in stats)
    # our trainer's log shows the recipe it ran (the effective-config check)
    checks = [json.loads(c) for (c,) in ws.sql("select recipe_check from stage where name = 'train' order by chain_id")]
    assert all(c["status"] == "verified" and {"learning_rate", "teacher_thinking"} <= {x["knob"] for x in c["checked"]}
               for c in checks), checks
    score = ws.sql("select k, n_problems, problems, partial, source from score order by chain_id")
    for k, n, problems, partial, source in score:
        assert (k, n, partial, source) == (4, 10, 0, "result.json")
        assert [p["samples"] for p in json.loads(problems)] == [4] * 10

    report = ws.cli_json("compare")
    assert report["baseline"]["source"] == "runs" and report["baseline"]["n"] == 2
    (cand,) = report["variants"]
    assert cand["name"] == "token-clip" and cand["n"] == 1 and cand["verdict"] in ("better", "worse", "undecided")
    assert report["noise"]["nu"] == 1  # one degree of freedom: the baseline's two runs

    env_file = tmp_path / "recipe.env"
    ws.cli("export-recipe", "token-clip", "-o", str(env_file), "--method-defaults", str(tmp_path / "m.toml"))
    hp = knobs.parse_recipe_env(env_file.read_text(), "recipe.env")
    assert hp == {}  # token-clip changes a method knob only: the recipe.env is the baseline's
    assert 'clip_mode = "token"' in (tmp_path / "m.toml").read_text()


def test_demo_refuses_a_workspace_that_holds_runs(ws):
    (ws.root / "runs.db").write_bytes(b"")
    out = ws.cli("demo", "--dir", str(ws.root), check=False)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "already holds" in out.stderr
