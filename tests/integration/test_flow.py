"""The whole control-plane flow with real subprocess stages and a real SQLite store:
queue -> worker --drain -> status -> export, plus result ingestion and failure reasons."""

from __future__ import annotations

import json
import sys
import textwrap

from conftest import FAKE_EVAL, FAKE_TRAIN, default_config

from opsdctl.recipes import knobs


def test_queue_worker_status_export(ws, tmp_path):
    # queue: two recipes x 2 repeats, JSON exactly as the contract says
    queued = ws.json("queue", "baseline", "token-clip", "--repeats", "2", "--seed", "7")
    assert [set(q) for q in queued] == [{"chain_id", "variant", "seed", "repeat", "partial", "eval_only", "checkpoint", "eval_draw"}] * 4
    assert [(q["variant"], q["seed"], q["repeat"]) for q in queued] == [
        ("baseline", 7, 0), ("baseline", 8, 1), ("token-clip", 7, 0), ("token-clip", 8, 1)]
    # queueing the same content again reuses the variant and continues the repeats
    again = ws.cli_json("queue", "baseline", "--priority", "5")
    full = {"partial": None, "eval_only": False, "checkpoint": None, "eval_draw": 0}  # a full train -> eval chain
    assert again == [{"chain_id": 5, "variant": "baseline", "seed": 2, "repeat": 2, **full}]  # seed = S + repeat
    assert ws.sql("select count(*) from variant") == [(2,)]

    st = ws.status()
    assert set(st) >= {"budget", "chains"}
    order = [c["chain_id"] for c in st["chains"] if c["state"] == "queued"]
    assert order == [5, 1, 2, 3, 4]  # priority first, then queue order

    out = ws.run("worker", "--drain")
    assert "queue drained" in out.stdout

    st = ws.status()
    chains = {c["chain_id"]: c for c in st["chains"]}
    assert set(chains) == {1, 2, 3, 4, 5}
    for c in chains.values():
        assert {"chain_id", "variant", "state", "stage", "score", "reason", "started_at", "finished_at"} <= set(c)
        assert c["state"] == "succeeded", c
        assert c["stage"] == "eval" and c["reason"] is None
        assert 0.0 <= c["score"] <= 100.0 and c["k"] == 4
        assert c["started_at"] and c["finished_at"]
    # the run order was honoured: chain 5 (priority 5) started first
    ran = [r[0] for r in ws.sql("select chain_id from stage where name = 'train' order by id")]
    assert ran == [5, 1, 2, 3, 4]
    # scores depend on the knobs (OPSD_CLIP_MODE reached the stage) and on the seed
    assert chains[3]["score"] != chains[1]["score"]

    # score rows: per-problem counts from result.json, points 0-100
    rows = ws.sql("select k, avg_at_k, n_problems, n_correct, n_samples, problems, partial, source from score where chain_id = 1")
    k, avg, n, correct, samples, problems, partial, source = rows[0]
    problems = json.loads(problems)
    assert (k, n, samples, source, partial) == (4, 6, 24, "result.json", 0)
    assert len(problems) == 6 and {"id", "correct", "samples", "mean_tokens"} <= set(problems[0])
    assert abs(avg - 100.0 * correct / samples) < 1e-6
    assert sum(p["correct"] for p in problems) == correct

    # training statistics from train_result.json + metrics.jsonl
    steps, loss, kl, clip, peak, curve, src = ws.sql(
        "select steps, final_loss, mean_kl, frac_clipped, peak_mem_mib, curve, source from train_stats where chain_id = 1")[0]
    assert steps == 4 and loss == -0.0079 and abs(clip - 0.25) < 1e-9 and peak == 1004
    assert abs(kl - (0.1 + 0.05 + 0.1 / 3 + 0.025) / 4) < 1e-9
    assert len(json.loads(curve)) == 4 and "train_result.json" in src

    # the run dir holds the stage-contract files
    run = ws.runs / "3"
    recipe = json.loads((run / "recipe.json").read_text())
    assert set(recipe) == {"name", "version", "hash", "description", "hparams", "method"}
    assert list(recipe["hparams"]) == list(knobs.HPARAMS) and recipe["method"]["clip_mode"] == "token"
    env = knobs.parse_recipe_env((run / "recipe.env").read_text(), "recipe.env")
    assert env == recipe["hparams"]
    train_log = (run / "train.log").read_text()
    assert "clip_mode=token" in train_log and f"hash {recipe['hash'][:12]}" in train_log
    assert (run / "train" / "checkpoint-final").is_dir() and (run / "eval" / "result.json").is_file()
    stage = ws.sql("select pid, pgid, create_time, exit_code, seconds, checkpoint, progress from stage "
                   "where chain_id = 3 and name = 'train'")[0]
    assert stage[0] == stage[1] and stage[2] > 0 and stage[3] == 0 and stage[4] > 0
    assert stage[5].endswith("runs/3/train/checkpoint-final")
    assert json.loads(stage[6])["text"] == "step 4/4"
    eval_progress = json.loads(ws.sql("select progress from stage where chain_id = 3 and name = 'eval'")[0][0])
    assert eval_progress["text"] == "6/6 items" and eval_progress["source"] == "progress.jsonl"

    # human status renders
    human = ws.run("status").stdout
    assert "finished" in human and "token-clip" in human and "succeeded" in human

    # export: header, whitelisted keys only, stable order; method knobs warned, written on request
    out_env = tmp_path / "export" / "recipe.env"
    defaults = tmp_path / "export" / "method.toml"
    res = ws.run("export-recipe", "token-clip", "-o", out_env)
    assert "clip_mode" in res.stderr and "--method-defaults" in res.stderr
    text = out_env.read_text()
    header = [l for l in text.splitlines() if l.startswith("#")]
    assert "token-clip" in header[0] and recipe["hash"] in "\n".join(header)
    # by default only what differs from the release: token-clip changes a method knob alone
    assert [l for l in text.splitlines() if l and not l.startswith("#")] == []
    assert "trains the baseline" in text and all(k in " ".join(header) for k in knobs.HPARAMS)
    assert knobs.parse_recipe_env(text, "x") == {}
    ws.run("export-recipe", "token-clip", "-o", out_env, "--all-keys")
    text = out_env.read_text()
    body = [l for l in text.splitlines() if l and not l.startswith("#")]
    assert [l.split("=")[0] for l in body] == list(knobs.HPARAMS)
    assert "fixed_teacher=true" in body and "use_ema_teacher=false" in body and "teacher_thinking=false" in body
    assert knobs.parse_recipe_env(text, "x") == recipe["hparams"]
    ws.cli("export-recipe", "token-clip", "-o", out_env, "--method-defaults", defaults)
    import tomllib

    method = tomllib.loads(defaults.read_text())["method"]
    assert method == recipe["method"] and set(method) == set(knobs.METHOD_KNOBS)
    # the baseline needs no warning: all its method knobs are the released defaults
    res = ws.cli("export-recipe", "baseline")
    assert res.stderr.strip() == "" and knobs.parse_recipe_env(res.stdout, "x") == {}
    assert "learning_rate=5e-06" in ws.cli("export-recipe", "baseline", "--all-keys").stdout

    # listings have --json
    variants = ws.cli_json("variants")
    assert {v["variant"]: v["succeeded"] for v in variants} == {"baseline": 3, "token-clip": 2}
    assert variants[1]["changes"] == {"clip_mode": "token"}


def test_versions_reuse_force_and_export_refusal(ws):
    ws.recipe("mine", """
        name = "mine"
        extends = "baseline"
        description = "lower lr"
        [hparams]
        learning_rate = 3e-6
    """)
    first = ws.cli_json("queue", "mine")
    assert first[0]["variant"] == "mine"
    ws.recipe("mine", """
        name = "mine"
        extends = "baseline"
        description = "a new description does not change the content"
        [hparams]
        learning_rate = 3e-6
    """)
    assert ws.cli_json("queue", "mine")[0]["variant"] == "mine"  # same hash: reused
    ws.recipe("mine", """
        name = "mine"
        extends = "baseline"
        [hparams]
        learning_rate = 2e-6
    """)
    before = ws.counts()
    refused = ws.cli("queue", "mine", check=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "--force" in refused.stderr and "learning_rate" in refused.stderr
    assert ws.counts() == before
    forced = ws.cli_json("queue", "mine", "--force")
    assert forced[0]["variant"] == "mine@v2"
    assert ws.sql("select name, version from variant where name = 'mine' order by version") == [("mine", 1), ("mine", 2)]

    # export: no succeeded chain -> refused unless --force; NAME@vN picks a version
    refused = ws.cli("export-recipe", "mine", check=False)
    assert refused.returncode == 2 and "no succeeded chain" in refused.stderr
    text = ws.cli("export-recipe", "mine", "--force").stdout
    assert [l for l in text.splitlines() if not l.startswith("#")] == ["learning_rate=2e-06"]  # only what changed
    header = " ".join(l.lstrip("# ") for l in text.splitlines() if l.startswith("#"))
    left = [k for k in knobs.HPARAMS if k != "learning_rate"]
    assert f"left out, equal to the released recipe ({len(left)}): " + ", ".join(left) in header
    assert knobs.parse_recipe_env(text, "x") == {"learning_rate": 2e-06}  # still a valid recipe.env
    assert "learning_rate=3e-06" in ws.cli("export-recipe", "mine@v1", "--force").stdout
    assert ws.cli("export-recipe", "mine@v9", "--force", check=False).returncode == 2
    assert ws.cli("export-recipe", "nosuch", check=False).returncode == 2


def test_stage_failures_carry_reasons(ws):
    """One worker run over four chains that each fail differently (the emulators read the
    recipe's extra method knob `fake_mode`, so this also shows extra_method_knobs at work)."""
    ws.write_config(default_config(extra='extra_method_knobs = ["fake_mode"]'))
    for mode in ("fail", "nockpt", "badresult", "silent"):
        ws.recipe(mode, f'name = "{mode}"\nextends = "baseline"\n[method]\nfake_mode = "{mode}"\n')
    ws.cli("queue", "fail", "nockpt", "badresult", "silent")
    ws.run("worker", "--drain")  # the real thing, in its own process
    c = ws.chains()
    # a train that exits 3: failed, with the exit code and the log's last line; eval never started
    assert c[1]["state"] == "failed" and c[1]["stage"] == "train"
    assert "exited with code 3" in c[1]["reason"] and "CUDA out of memory (emulated)" in c[1]["reason"]
    assert ws.sql("select count(*) from stage where chain_id = 1") == [(1,)]
    # a train that exits 0 without the checkpoint the config names
    assert c[2]["state"] == "failed" and "no checkpoint" in c[2]["reason"] and "checkpoint-final" in c[2]["reason"]
    # a malformed result.json
    assert c[3]["state"] == "failed" and c[3]["stage"] == "eval" and "avg_at_k" in c[3]["reason"]
    # an eval that writes neither result.json nor a FINAL line
    assert c[4]["state"] == "failed" and "no FINAL line" in c[4]["reason"]
    assert ws.sql("select count(*) from score") == [(0,)]
    assert ws.sql("select count(*) from train_stats") == [(4,)]  # statistics are kept for failed runs too

    # requeue a failed chain: a fresh chain pointing at it, same seed and snapshot
    ws.write_config(default_config(extra='extra_method_knobs = ["fake_mode"]'))
    new = ws.cli_json("requeue", "4")
    assert new == {"chain_id": 5, "variant": "silent", "seed": 0, "repeat": 0, "partial": None, "eval_only": False,
                   "checkpoint": None, "eval_draw": 0}
    assert ws.sql("select requeued_from, state, snapshot_id from chain where id = 5") == [(4, "queued", 1)]
    assert ws.cli("requeue", "5", check=False).returncode == 2  # queued: refused
    ws.cli("cancel", "5")
    assert ws.cli("requeue", "5").returncode == 0  # cancelled: fine


def test_external_scripts_setup(ws):
    """A user's own train/eval scripts, score from the FINAL line, training
    statistics and progress from the Hugging Face Trainer dict lines in the log."""
    workspace = ws.root / "workspace"
    workspace.mkdir()
    train_sh = workspace / "train_capped.sh"
    train_sh.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        set -euo pipefail
        export FAKE_CHECKPOINT="$OUT_DIR/capped_seed$SEED/checkpoint-100"
        export FAKE_NO_FILES=1 FAKE_BAR=1
        exec {sys.executable} {FAKE_TRAIN}
    """))
    eval_sh = workspace / "dev_eval.sh"
    eval_sh.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        set -euo pipefail
        {sys.executable} {FAKE_EVAL} "$1" --final-only
    """))
    ws.write_config(
        train=f"SEED={{seed}} OUT_DIR={{stage_dir}} bash {train_sh}",
        eval=f"bash {eval_sh} {{checkpoint}}",
        checkpoint="{stage_dir}/capped_seed{seed}/checkpoint-100",
    )
    ws.cli("queue", "baseline", "--seed", "42")
    ws.run("worker", "--drain")
    c = ws.chains()[1]
    assert c["state"] == "succeeded", c
    ckpt = ws.sql("select checkpoint from stage where chain_id = 1 and name = 'train'")[0][0]
    assert ckpt.endswith("runs/1/train/capped_seed42/checkpoint-100")
    k, avg, n, correct, samples, problems, source = ws.sql(
        "select k, avg_at_k, n_problems, n_correct, n_samples, problems, source from score")[0]
    assert (k, n, samples, source, problems) == (4, 6, 24, "final-line", None)
    assert abs(avg - c["score"]) < 1e-9 and abs(avg - round(100 * correct / samples, 2)) < 1e-9
    steps, loss, rollout, curve, src = ws.sql(
        "select steps, final_loss, rollout_seconds, curve, source from train_stats")[0]
    assert (steps, loss, src) == (4, -0.0079, "log") and len(json.loads(curve)) == 4
    assert abs(rollout - (0.51 + 0.52 + 0.53 + 0.54) / 4) < 1e-9
    progress = json.loads(ws.sql("select progress from stage where name = 'train'")[0][0])
    assert progress["source"] == "log" and progress["text"] == "step 4/4"  # the Trainer's bar: 4 steps


def test_stage_timeout(ws):
    text = default_config().replace("[stages.eval]\n", "[stages.eval]\ntimeout_minutes = 0.02\n")
    ws.write_config(text)
    ws.env = {"FAKE_HANG": "1", "FAKE_CHILD": "1"}
    ws.cli("queue", "baseline")
    ws.cli("worker", "--drain")
    c = ws.chains()[1]
    assert c["state"] == "failed" and "eval timed out after 0.02 min" in c["reason"]
    child = int((ws.runs / "1" / "eval" / "child.pid").read_text())
    from conftest import pid_alive

    assert not pid_alive(child)
