"""`queue --env FILE [--name N]`: a recipe.env (KEY=VALUE, the users' native format) queued as a
recipe, checked by the same whitelist as a TOML recipe; `queue my.env` (which failed with
`invalid TOML` and no hint) says how to queue it. Bad input: one line, exit 2, nothing written."""

from __future__ import annotations

import pytest


def test_queue_a_recipe_env_and_it_is_the_same_recipe_as_its_toml(ws):
    (ws.root / "my.env").write_text("# tried on the dev box\nlearning_rate=1e-5\nlr_scheduler_type=cosine\n")
    out = ws.cli_json("queue", "--env", "my.env", "--name", "lr-up")
    assert [c["variant"] for c in out] == ["lr-up"]
    ws.recipe("lr-up-toml", """\
        name = "lr-up-toml"
        [hparams]
        learning_rate = 1e-5
        lr_scheduler_type = "cosine"
    """)
    ws.cli("queue", "lr-up-toml")
    hashes = dict(ws.sql("select name, hash from variant"))
    assert hashes["lr-up"] == hashes["lr-up-toml"]  # one identity: the resolved knobs
    ws.cli("worker", "--drain")
    assert ws.state(1) == "succeeded"
    env = (ws.runs / "1" / "recipe.env").read_text()
    assert "learning_rate=1e-05" in env.replace("1e-5", "1e-05") and "lr_scheduler_type=cosine" in env


def test_a_recipe_env_is_named_after_its_file_without_name(ws):
    (ws.root / "warm.env").write_text("warmup_ratio=0.1\n")
    assert [c["variant"] for c in ws.cli_json("queue", "--env", "warm.env")] == ["warm"]


def test_queue_my_env_without_env_says_how(ws):
    (ws.root / "my.env").write_text("lr_scheduler_type=cosine\n")
    res = ws.cli("queue", "my.env", check=False)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "opsdctl queue --env my.env" in res.stderr and "invalid TOML" not in res.stderr


@pytest.mark.parametrize("body, words", [
    ("max_steps=200\n", "max_steps"),  # a budget knob
    ("lora_r=512\n", "lora_r"),  # out of range
    ("learnig_rate=1e-5\n", "learning_rate"),  # a typo: not whitelisted, the closest named
    ("learning_rate=fast\n", "learning_rate"),
    ("learning_rate=1e-5\nlearning_rate=2e-5\n", "twice"),
])
def test_a_bad_recipe_env_is_refused_in_one_line_and_nothing_is_written(ws, body, words):
    (ws.root / "bad.env").write_text(body)
    before = ws.counts() if ws.db.exists() else {}
    res = ws.cli("queue", "--env", "bad.env", check=False)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and words in res.stderr, res.stderr
    assert (ws.counts() if ws.db.exists() else {}) == before


def test_a_bad_name_is_refused(ws):
    (ws.root / "ok.env").write_text("warmup_ratio=0.1\n")
    res = ws.cli("queue", "--env", "ok.env", "--name", "has space", check=False)
    assert res.returncode == 2 and "--name NAME" in res.stderr
