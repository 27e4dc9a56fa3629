"""The variant's recipe reaches a user's script that reads
submission/recipe.env; the run proves it used it (effective-config check); stage commands are
frozen per chain. Real subprocesses, a real git workspace ignoring opsdctl's files, and the
stand-in train_capped.sh / dev_eval.sh of tests/stages/."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import textwrap

import pytest
from conftest import STAGES, wait_for

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
USERS_RECIPE = "# the recipe I mean to submit\nlearning_rate=5e-06\n"


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=GIT_ENV).stdout


def config(*, recipe_env_path: bool = True, snapshot: bool = True, train: str = "", expect: str = "") -> str:
    train = train or "SEED={seed} OUT_DIR={stage_dir} bash train_capped.sh"
    path = 'recipe_env_path = "submission/recipe.env"' if recipe_env_path else ""
    return textwrap.dedent(f"""\
        profile = "qwen3-1.7b"
        snapshot_code = {str(snapshot).lower()}

        [gpus]
        devices = []

        [stages.train]
        command = {json.dumps(train)}
        checkpoint = "{{stage_dir}}/capped_seed{{seed}}/checkpoint-100"
        {path}

        [stages.eval]
        command = "bash dev_eval.sh {{checkpoint}}"

        [baseline]
        variant = "baseline"
        reference = {{ mean = 54.22, sd = 1.48, n = 5 }}

        [worker]
        poll_seconds = 0.2
        kill_grace_seconds = 2
        """) + (f"\n[stages.train.expect]\n{expect}\n" if expect else "")


def workspace(ws, *, git_repo: bool = True, **kw):
    """A research workspace: scripts, submission/recipe.env, a .gitignore listing opsdctl's files."""
    for name in ("train_capped.sh", "dev_eval.sh"):
        shutil.copy(STAGES / name, ws.root / name)
    (ws.root / "submission").mkdir()
    (ws.root / "submission" / "recipe.env").write_text(USERS_RECIPE)
    ws.write_config(config(**kw))
    ws.recipe("lr-up", """\
        name = "lr-up"
        extends = "baseline"
        [hparams]
        learning_rate = 1e-5
        teacher_thinking = false
        """)
    if git_repo:
        (ws.root / ".gitignore").write_text("runs.db\nruns/\n")
        git(ws.root, "init", "-q")
        git(ws.root, "add", "-A")
        git(ws.root, "commit", "-q", "-m", "workspace")


def trained_with(ws, chain_id: int) -> str:
    ckpt = ws.sql("select checkpoint from stage where chain_id = ? and name = 'train'", chain_id)[0][0]
    return open(f"{ckpt}/trained_with.txt").read().strip()


def test_each_variant_trains_its_own_recipe_and_the_log_proves_it(ws):
    workspace(ws)
    ws.run("queue", "baseline", "lr-up")
    out = ws.run("worker", "--drain").stdout
    assert ws.state(1) == "succeeded" and ws.state(2) == "succeeded", out
    assert trained_with(ws, 1) == "learning_rate=5e-06"
    assert trained_with(ws, 2) == "learning_rate=1e-05"  # the variant's, not the workspace's file
    assert "recipe verified in the train log: learning_rate 1e-05, schedule constant" in out
    # the user's file is what it was in the workspace; the shared snapshot never holds it (the
    # variant's replaces it for every train, so its content is not part of the code identity)
    assert (ws.root / "submission" / "recipe.env").read_text() == USERS_RECIPE
    key = ws.sql("select key from code_snapshot")[0][0]
    assert (ws.runs / "code" / key / "train_capped.sh").is_file()
    assert not (ws.runs / "code" / key / "submission" / "recipe.env").exists()
    # each chain ran in its own view of the snapshot, restored after its train stage
    cwd = ws.sql("select cwd from stage where chain_id = 2 and name = 'train'")[0][0]
    assert cwd == str(ws.runs / "2" / "code")
    assert not (ws.runs / "2" / "code" / "submission" / "recipe.env").exists()  # as in the snapshot
    doc = ws.cli_json("show", "lr-up")
    check = doc["runs"][0]["recipe_check"]
    assert check["status"] == "verified"
    assert {c["knob"]: c["log"] for c in check["checked"]} == {
        "learning_rate": 1e-05, "schedule": "constant", "teacher_thinking": False, "student_thinking": False}
    assert "verified" in ws.cli("show", "lr-up").stdout


def test_without_recipe_env_path_the_baseline_run_is_caught(ws):
    """The README's old example: every variant trained the workspace's file, and nothing said so."""
    workspace(ws, recipe_env_path=False)
    ws.run("queue", "lr-up")
    ws.run("worker", "--drain")
    assert ws.state(1) == "failed"
    reason = ws.sql("select reason from chain where id = 1")[0][0]
    assert reason == "recipe not applied: log says learning_rate 5e-06, recipe says 1e-05"
    assert ws.sql("select count(*) from score") == [(0,)]
    assert ws.cli_json("show", "lr-up")["runs"][0]["recipe_check"]["status"] == "mismatch"


def test_a_log_with_nothing_to_check_says_not_verified(ws):
    workspace(ws, train="mkdir -p {stage_dir}/capped_seed{seed}/checkpoint-100 && echo trained")
    ws.run("queue", "lr-up")
    ws.run("worker", "--drain")
    assert ws.state(1) == "succeeded"
    check = ws.cli_json("show", "lr-up")["runs"][0]["recipe_check"]
    assert check["status"] == "not verified" and check["checked"] == []
    assert any("learning_rate" in u for u in check["unchecked"])
    assert "not verified" in ws.cli("show", "lr-up").stdout


def test_expect_patterns_fail_a_chain_whose_log_disagrees(ws):
    workspace(ws, expect='lora_r = "^lora_r=(\\\\d+)"')
    ws.recipe("small-r", 'name = "small-r"\nextends = "baseline"\n[hparams]\nlora_r = 32\n')
    ws.run("queue", "small-r")
    ws.run("worker", "--drain")
    assert ws.state(1) == "succeeded"  # the stand-in prints the recipe's lora_r
    ws.run("queue", "small-r")
    ws.run("worker", "--drain", env={"STANDIN_LORA_R": "64"})  # a script that ignores it
    assert ws.sql("select reason from chain where id = 2")[0][0] == "recipe not applied: log says lora_r 64, recipe says 32"


@pytest.mark.parametrize("body,words", [
    ('[stages.train]\nrecipe_env_path = "/etc/recipe.env"\n', "relative to the code dir"),
    ('[stages.train]\nrecipe_env_path = "../recipe.env"\n', "without '..'"),
    ('[stages.train.expect]\nlearning_rate = "lr=[0-9.]+"\n', "exactly one (group)"),
    ('[stages.train.expect]\nlearning_rate = "lr=([0-9.]+"\n', "not a valid regex"),
    ('[stages.train.expect]\nlearnin_rate = "lr=([0-9.]+)"\n', "did you mean learning_rate"),
])
def test_bad_recipe_env_and_expect_config_is_one_line(ws, body, words):
    ws.write_config('profile = "tiny"\n[gpus]\ndevices = []\n' + body)
    proc = ws.run("queue", "baseline", check=False)
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not ws.db.exists() or ws.sql("select count(*) from chain") == [(0,)]


def test_live_code_dir_recipe_restored_after_the_stage_and_after_a_crash(ws):
    workspace(ws, snapshot=False, git_repo=False)
    target = ws.root / "submission" / "recipe.env"
    ws.run("queue", "lr-up")
    worker = ws.popen("worker", "--drain", env={"STANDIN_SLEEP": "60"})
    try:
        wait_for(lambda: "[modes]" in (ws.runs / "1" / "train.log").read_text()
                 if (ws.runs / "1" / "train.log").exists() else False, timeout=60, what="the train stage")
        assert "learning_rate=1e-05" in target.read_text()  # the variant's, while it trains
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert "learning_rate=1e-05" in target.read_text()  # the dead worker could not undo it
    out = ws.run("worker", "--drain").stdout  # recovery restores it, then runs the re-queued chain
    assert f"restored the original {target}" in out, out
    assert target.read_text() == USERS_RECIPE
    assert ws.state(1) == "interrupted" and ws.state(2) == "succeeded"
    assert trained_with(ws, 2) == "learning_rate=1e-05"
    assert target.read_text() == USERS_RECIPE and not (ws.runs / "2" / "recipe_env.restore.json").exists()


def test_live_code_dir_without_the_file_leaves_none_behind(ws):
    workspace(ws, snapshot=False, git_repo=False)
    shutil.rmtree(ws.root / "submission")
    ws.run("queue", "lr-up")
    ws.run("worker", "--drain")
    assert ws.state(1) == "succeeded" and trained_with(ws, 1) == "learning_rate=1e-05"
    assert not (ws.root / "submission").exists()


def test_stage_commands_are_frozen_per_chain(ws):
    workspace(ws, train="echo COMMAND-A && SEED={seed} OUT_DIR={stage_dir} bash train_capped.sh")
    ws.run("queue", "baseline")
    ws.write_config(config(train="echo COMMAND-B && SEED={seed} OUT_DIR={stage_dir} bash train_capped.sh"))
    ws.run("queue", "baseline")
    out = ws.run("worker", "--drain").stdout
    assert "COMMAND-A" in (ws.runs / "1" / "train.log").read_text()  # as queued, not as edited
    assert "COMMAND-B" in (ws.runs / "2" / "train.log").read_text()
    assert "chain 1: runs the stage settings frozen when it was queued; opsdctl.toml has changed " \
           "[stages.train] command since" in out, out
    assert "chain 2: runs the stage settings" not in out
    h1, h2 = (r["commands_hash"] for r in ws.cli_json("show", "baseline")["runs"])
    assert h1 and h2 and h1 != h2
    ws.cli("requeue", "1")  # a re-run keeps its chain's commands
    ws.run("worker", "--drain")
    assert "COMMAND-A" in (ws.runs / "3" / "train.log").read_text()
    assert ws.sql("select commands_hash from chain where id = 3")[0][0] == h1


def test_the_documented_example_is_the_config_these_tests_run(tmp_path):
    """docs/configuration.md "Driving your own scripts": its config loads, and its stage settings are exactly
    the ones the tests above drive the stand-in scripts with."""
    import re

    from conftest import REPO

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    from opsdctl.config import config_from_dict
    from opsdctl.run.frozen_stages import spec_of

    doc = (REPO / "docs" / "configuration.md").read_text()
    section = doc[doc.index("## Driving your own scripts"):]
    block = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    shown = spec_of(config_from_dict(tomllib.loads(block), tmp_path))
    tested = spec_of(config_from_dict(tomllib.loads(config()), tmp_path))
    assert shown["train"]["recipe_env_path"] == "submission/recipe.env"
    assert {**shown["train"], "expect": {}} == tested["train"] and shown["eval"] == tested["eval"]
    assert shown["train"]["expect"] == {"my_clip_rule": r"clip rule: (\w+)"}
