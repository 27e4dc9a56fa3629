"""Eval-only chains: `queue --eval-only CHECKPOINT_DIR|base [--name NAME]` and
`requeue --eval-only CHAIN`, through the same gate, admission and store, scored as the variant that
trained the checkpoint, and never counting one training twice. Real subprocess stages, real SQLite."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import FAKE_EVAL, default_config
from fixtures_tiny import tiny_assets  # noqa: F401  (pytest fixture)

PY = sys.executable


def _eval_timeout(ws, minutes: float) -> None:
    cfg = (ws.root / "opsdctl.toml").read_text()
    eval_cmd = json.dumps(f"{PY} {FAKE_EVAL} {{checkpoint}} --output-dir {{stage_dir}}")
    cfg = cfg.replace(f"[stages.eval]\ncommand = {eval_cmd}", f"[stages.eval]\ncommand = {eval_cmd}\ntimeout_minutes = {minutes}")
    assert "timeout_minutes" in cfg
    (ws.root / "opsdctl.toml").write_text(cfg)


def test_requeue_eval_only_evaluates_the_trained_checkpoint_after_a_timeout(ws):
    _eval_timeout(ws, 0.02)  # 1.2 s: the slow eval below is cut
    ws.cli("queue", "token-clip", "--seed", "5")
    ws.run("worker", "--drain", env={"FAKE_EVAL_SECONDS": "0.6"})
    c1 = ws.chains()[1]
    assert c1["state"] == "failed" and "eval timed out" in c1["reason"]
    ckpt = str((ws.runs / "1" / "train" / "checkpoint-final").resolve())

    new = ws.cli_json("requeue", "1", "--eval-only")
    assert new == {"chain_id": 2, "variant": "token-clip", "seed": 5, "repeat": 0, "partial": None,
                   "eval_only": True, "checkpoint": ckpt, "eval_draw": 0}
    assert "eval only" in ws.cli("status").stdout
    ws.run("worker", "--drain")
    c2 = ws.chains()[2]
    assert c2["state"] == "succeeded" and c2["eval_only"] and c2["trained_by"] == 1 and c2["checkpoint"] == ckpt
    assert [s["name"] for s in c2["stages"]] == ["eval"]  # nothing was trained again
    assert ws.sql("select count(*) from stage where chain_id = 2 and name = 'train'") == [(0,)]
    assert ckpt in ws.sql("select command from stage where chain_id = 2")[0][0]

    # the score is token-clip's, seed 5: one run of it
    show = ws.cli_json("show", "token-clip")
    (run,) = [r for r in show["runs"] if r["chain_id"] == 2]
    assert run["eval_only"] and run["trained_by"] == 1 and run["score"] is not None and run["seed"] == 5
    assert run["train"]["final_loss"] is not None  # its training is chain 1's
    report = ws.cli_json("compare")
    (tc,) = [e for e in report["variants"] if e["name"] == "token-clip"]
    assert tc["n"] == 1 and tc["chain_ids"] == [2]
    (row,) = [r for r in report["training"] if r["name"] == "token-clip"]
    assert row["runs"] == 1 and row["final_loss"] is not None  # compare's training columns: chain 1's statistics

    # one training is one run: a second full evaluation is refused in one line, nothing written
    before = ws.sql("select count(*) from chain")
    for args in (("requeue", "2", "--eval-only"), ("requeue", "1", "--eval-only"), ("queue", "--eval-only", ckpt)):
        proc = ws.cli(*args, check=False)
        assert proc.returncode == 2 and "would count one training twice" in proc.stderr, (args, proc.stderr)
    assert ws.sql("select count(*) from chain") == before
    # ... a partial screening of it is fine, and stays apart from the full score
    again = ws.cli_json("requeue", "1", "--eval-only", "--partial", "3x2")
    assert again["partial"] == {"num_problems": 3, "k": 2} and again["eval_only"]
    ws.run("worker", "--drain")
    report = ws.cli_json("compare")
    assert [(e["n"], e["partial"]) for e in report["variants"] if e["name"] == "token-clip"] == [(1, False), (1, True)]


def test_requeue_eval_only_refusals(ws):
    ws.cli("queue", "baseline")
    proc = ws.cli("requeue", "1", "--eval-only", check=False)
    assert proc.returncode == 2 and "only a finished chain's checkpoint" in proc.stderr
    ws.write_config(default_config(train=f"{PY} -c 'import sys; sys.exit(3)'"))
    ws.cli("cancel", "1")
    proc = ws.cli("requeue", "1", "--eval-only", check=False)
    assert proc.returncode == 2 and "has no trained checkpoint" in proc.stderr
    proc = ws.cli("requeue", "1", "--full", check=False)
    assert proc.returncode == 2 and "add --eval-only" in proc.stderr


def test_queue_eval_only_base_store_and_outside_checkpoints(ws, tmp_path):
    ws.cli("queue", "baseline", "--seed", "3")
    ws.run("worker", "--drain")
    trained = str((ws.runs / "1" / "train" / "checkpoint-final").resolve())
    outside = tmp_path / "capped_seed42" / "checkpoint-100"
    outside.mkdir(parents=True)
    (outside / "adapter_config.json").write_text(json.dumps({"seed": 42, "clip_mode": "token"}))

    # refused, one line each, nothing written
    n = ws.sql("select count(*) from chain")
    for args, words in [
        (("--eval-only", str(outside)), "name the variant its score belongs to with --name"),
        (("--eval-only", str(outside), "--name", "baseline"), "already a recipe variant"),
        (("--eval-only", str(tmp_path / "nope")), "no such directory"),
        (("--eval-only", trained, "--name", "other"), "its scores belong to baseline"),
        (("--eval-only", "base", "--repeats", "2"), "one checkpoint is one training run"),
        (("baseline", "--eval-only", "base"), "takes no RECIPE"),
        (("baseline", "--name", "x"), "--name names an --eval-only checkpoint or an --env recipe.env"),
    ]:
        proc = ws.cli("queue", *args, check=False)
        assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
    assert ws.sql("select count(*) from chain") == n

    a = ws.cli_json("queue", "--eval-only", trained, "--partial", "3x2")  # a store checkpoint: baseline's
    b = ws.cli_json("queue", "--eval-only", "base")
    c = ws.cli_json("queue", "--eval-only", str(outside), "--name", "mine")
    assert [(q["variant"], q["seed"], q["eval_only"]) for q in a + b + c] == [
        ("baseline", 3, True), ("base", 0, True), ("mine", 0, True)]
    assert ws.sql("select requeued_from, trained_by from chain where id = 2") == [(1, 1)]

    ws.run("worker", "--drain")
    chains = ws.chains()
    assert all(chains[i]["state"] == "succeeded" for i in (2, 3, 4)), chains
    assert ws.sql("select count(*) from stage where name = 'train'") == [(1,)]  # only chain 1 trained
    assert " base " in ws.sql("select command from stage where chain_id = 3")[0][0]
    kinds = {r["variant"]: r["kind"] for r in ws.cli_json("variants")}
    assert kinds == {"baseline": "recipe", "base": "base", "mine": "checkpoint"}
    assert "(base model)" in ws.cli("variants").stdout
    assert "the base model (untrained)" in ws.cli("show", "base").stdout
    # the base model scores lower than a trained recipe in the emulator; it is a candidate in compare
    report = ws.cli_json("compare")
    names = {(e["name"], e["partial"]) for e in report["variants"] if e.get("n")}
    assert {("base", False), ("mine", False), ("baseline", True)} <= names
    d = ws.cli_json("diff", "1", "3")  # the baseline's chain vs the base model's
    assert d["knobs"] == [] and "chain 3 is the base model" in d["knobs_note"] and not d["same_candidate"]
    assert d["commands"] == []  # the same eval template: the checkpoint is written back as {checkpoint}
    proc = ws.cli("export-recipe", "base", check=False)
    assert proc.returncode == 2 and "not a recipe" in proc.stderr
    # an outside checkpoint evaluated again under the same name is another run of it
    d = ws.cli_json("queue", "--eval-only", str(outside), "--name", "mine")
    assert d[0]["variant"] == "mine" and ws.sql("select count(*) from variant where name = 'mine'") == [(1,)]


def test_eval_only_passes_admission_on_its_eval_alone(ws):
    """Same gate and admission: a chain whose training cannot fit is skipped, an eval-only one runs."""
    ws.write_config(default_config(extra="[planner]\ntrain_minutes = 60\neval_minutes = 1",
                                   budget="hours = 0.5\nmargin_minutes = 0"))
    ws.cli("queue", "baseline")
    ws.cli("queue", "--eval-only", "base")
    ws.run("worker", "--drain")
    chains = ws.chains()
    assert chains[1]["state"] == "skipped" and "needs ~61 min" in chains[1]["reason"]
    assert chains[2]["state"] == "succeeded"
    est = ws.sql("select estimate_seconds from stage where chain_id = 2")
    assert est == [(60.0,)]  # admitted on the eval's own estimate ([planner] eval_minutes = 1)


def test_gc_keeps_the_checkpoint_an_eval_only_chain_needs(ws):
    ws.cli("queue", "baseline")
    ws.run("worker", "--drain")
    ckpt = ws.runs / "1" / "train" / "checkpoint-final"
    ws.cli("queue", "--eval-only", str(ckpt), "--partial", "3x2")
    doc = ws.cli_json("gc", "--dry-run")
    assert not any(str(ckpt).startswith(i["path"]) or i["path"].startswith(str(ws.runs / "1" / "train"))
                   for i in doc["items"]), doc["items"]


@pytest.mark.slow
def test_partial_eval_only_of_the_base_model_with_our_evaluator(ws, tiny_assets):  # noqa: F811
    """The starter config's `python -m eval ... --adapter {checkpoint} --num-problems {num_problems}
    --k {k}`: the base model, 4 problems x 2 samples, no training."""
    ws.cli("init", "--profile", "tiny", "--force")
    cfg = (ws.root / "opsdctl.toml").read_text().replace("snapshot_code = true ", "snapshot_code = false")
    (ws.root / "opsdctl.toml").write_text(cfg)
    ws.cli("queue", "--eval-only", "base", "--partial", "4x2")
    ws.run("worker", "--drain", timeout=600)
    (chain,) = ws.chains().values()
    assert chain["state"] == "succeeded" and chain["partial"] and chain["eval_only"], chain
    k, n, problems, partial, source = ws.sql("select k, n_problems, problems, partial, source from score")[0]
    assert (k, n, partial, source) == (2, 4, 1, "result.json")
    assert [p["samples"] for p in json.loads(problems)] == [2] * 4
    assert "--num-problems 4 --k 2" in ws.sql("select command from stage")[0][0]
