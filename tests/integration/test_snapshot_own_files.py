"""In a normal git workspace opsdctl's own files (the store, its WAL/SHM and
lock files, the runs dir) never enter a code snapshot, whatever the user's .gitignore says.
Nor do the control plane's inputs and outputs (opsdctl.toml, recipes/, the budget countdown
file, the auto-exported recipe.env, the recipe_env_path file): a chain's code identity
must not change when the config is edited, a recipe added or the timer ticks."""

from __future__ import annotations

import subprocess

import pytest
from conftest import default_config, opsdctl_argv, clean_env

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def git(cwd, *args) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=GIT_ENV).stdout


def _tree_paths(ws, key: str) -> list[str]:
    return git(ws.root, "ls-tree", "-r", "--name-only", key).split()


@pytest.mark.parametrize("ignore", ["runs.db\n", "runs/\n", "runs.db*\nruns/\n", "/runs\n*.db\n*.lock\n"])
def test_queue_twice_with_own_files_ignored(ws, ignore):
    """`git init; echo runs.db > .gitignore; opsdctl init; opsdctl queue baseline` failed at once;
    with only runs/ ignored, the second queue failed."""
    ws.write_config(default_config(snapshot=True))
    git(ws.root, "init", "-q")
    (ws.root / ".gitignore").write_text(ignore)
    (ws.root / "train.py").write_text("print('hi')\n")
    ws.run("queue", "baseline")
    ws.run("queue", "token-clip")  # runs/ and runs.db (+ -wal/-shm) exist now
    ws.run("worker", "--drain")
    assert [s for (s,) in ws.sql("select state from chain order by id")] == ["succeeded", "succeeded"]
    (key,) = {k for (k,) in ws.sql("select key from code_snapshot")}
    paths = _tree_paths(ws, key)
    assert "train.py" in paths and "opsdctl.toml" not in paths
    assert not [p for p in paths if p.startswith(("runs", "recipes/"))], paths


def test_init_then_queue_in_a_fresh_repository(tmp_path):
    """The reported reproduction, command for command (`opsdctl init` writes the config)."""
    root = tmp_path / "w"
    root.mkdir()
    git(root, "init", "-q")
    (root / ".gitignore").write_text("runs.db\n")
    env = clean_env()
    for args in (["init"], ["queue", "baseline"], ["queue", "baseline"]):
        proc = subprocess.run([*opsdctl_argv(), *args], cwd=root, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)


def test_tracked_store_file_is_left_out(ws):
    """A runs.db committed by mistake (and runs/ not ignored at all) stays out of the snapshot;
    the user's own index is untouched."""
    ws.write_config(default_config(snapshot=True))
    git(ws.root, "init", "-q")
    (ws.root / "train.py").write_text("print('hi')\n")
    ws.run("queue", "baseline")  # creates runs.db and runs/
    git(ws.root, "add", "-f", "runs.db", "opsdctl.toml")
    git(ws.root, "commit", "-q", "-m", "oops")
    staged = git(ws.root, "ls-files", "--stage")
    ws.run("queue", "token-clip")
    assert git(ws.root, "ls-files", "--stage") == staged
    key = ws.sql("select key from code_snapshot order by id desc")[0][0]
    paths = _tree_paths(ws, key)
    assert "train.py" in paths and "opsdctl.toml" not in paths, paths
    assert not [p for p in paths if p.startswith("runs")], paths


def _identity_workspace(ws, use_git: bool) -> None:
    config = default_config(snapshot=True, budget='remaining_file = ".timer/remaining_secs"')
    config = config.replace('checkpoint = "{stage_dir}/checkpoint-final"',
                            'checkpoint = "{stage_dir}/checkpoint-final"\nrecipe_env_path = "submission/recipe.env"')
    config += '\n[export]\npath = "submission/best.env"\n'
    (ws.root / ".timer").mkdir()
    (ws.root / ".timer" / "remaining_secs").write_text("21600\n")
    (ws.root / "submission").mkdir()
    (ws.root / "submission" / "recipe.env").write_text("learning_rate=5e-6\n")
    (ws.root / "train.py").write_text("print('hi')\n")
    ws.write_config(config)
    if use_git:
        git(ws.root, "init", "-q")
        git(ws.root, "add", "-A")
        git(ws.root, "commit", "-q", "-m", "workspace")  # config, recipes, timer, recipe.env all tracked


@pytest.mark.parametrize("use_git", [True, False], ids=["git", "copy"])
def test_config_recipes_timer_and_exports_do_not_change_code_identity(ws, use_git):
    _identity_workspace(ws, use_git)
    ws.run("queue", "baseline")
    # What the control plane and the session change between two queues:
    (ws.root / ".timer" / "remaining_secs").write_text("20000\n")  # the countdown ticks
    with open(ws.root / "opsdctl.toml", "a") as f:
        f.write("# a comment added between two queues\n")
    ws.recipe("new-idea", 'method = "opsd"\n[hparams]\nlearning_rate = 1e-5\n')
    (ws.root / "submission" / "best.env").write_text("learning_rate=1e-5\n")  # an auto-export
    (ws.root / "submission" / "recipe.env").write_text("learning_rate=1e-5\n")
    ws.run("queue", "baseline")
    keys = [k for (k,) in ws.sql("select s.key from chain c join code_snapshot s on s.id = c.snapshot_id order by c.id")]
    assert len(keys) == 2 and keys[0] == keys[1], keys
    (ws.root / "train.py").write_text("print('changed')\n")  # the code itself: a new identity
    ws.run("queue", "baseline")
    keys = [k for (k,) in ws.sql("select s.key from chain c join code_snapshot s on s.id = c.snapshot_id order by c.id")]
    assert keys[2] != keys[0], keys
