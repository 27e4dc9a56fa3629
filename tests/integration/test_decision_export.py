"""`export-recipe --leader`: the bet (highest forecast official mean) with its forecast in the
header, and a code-only change named with the way back (`opsdctl code CHAIN --to DIR`)."""

from __future__ import annotations

from conftest import default_config
from integration.test_snapshot import TRAIN, git

from opsdctl.recipes import knobs


def test_export_leader_names_its_forecast_and_its_code(ws, tmp_path):
    (ws.root / "version.py").write_text('VERSION = "released"\n')
    (ws.root / ".gitignore").write_text("runs/\nruns.db*\n")
    ws.write_config(default_config(train=TRAIN.replace("{seed}", "{seed} --recipe {recipe_json}"), snapshot=True))
    ws.recipe("hot", 'extends = "token-clip"\n[hparams]\nlearning_rate = 1e-5\n')  # +15 points in fake_eval
    ws.env.update({"FAKE_PROBLEMS": "30", "FAKE_K": "8"})
    git(ws.root, "init", "-q")
    git(ws.root, "add", "-A")
    git(ws.root, "commit", "-q", "-m", "start")
    ws.cli("queue", "baseline", "--repeats", "2")
    (ws.root / "version.py").write_text('VERSION = "edited trainer"\n')  # the method now lives in code too
    ws.cli("queue", "hot", "--repeats", "2")
    ws.cli("worker", "--drain")

    doc = ws.cli_json("compare")
    hot = next(e for e in doc["variants"] if e["name"] == "hot")
    assert hot["forecast"]["mean"] > doc["baseline"]["forecast"]["mean"]
    out = tmp_path / "recipe.env"
    ws.cli("export-recipe", "--leader", "-o", str(out))
    text = out.read_text()
    assert knobs.parse_recipe_env(text, "recipe.env") == {"learning_rate": 1e-5}
    head = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    f = hot["forecast"]
    assert f"forecast of the official 5-run mean: hot {f['mean']:.2f}, 80% interval [{f['low80']:.2f}, " \
           f"{f['high80']:.2f}]" in head
    assert head.count("the method lives in code") == 1 and f"@{hot['code']}" in head
    chain = hot["chain_ids"][-1]
    assert head.count(f"`opsdctl code {chain} --to DIR`") == 1
    # and that way back works: the edited code comes out
    ws.cli("code", str(chain), "--to", str(tmp_path / "code"))
    assert (tmp_path / "code" / "version.py").read_text() == 'VERSION = "edited trainer"\n'


def test_export_of_a_candidate_whose_method_lives_only_in_code(ws, tmp_path):
    """The released knobs on edited code: `export-recipe NAME` says once that the (empty) recipe.env
    trains the candidate only with its code snapshot, and how to restore it; never "trains the baseline"."""
    (ws.root / "version.py").write_text('VERSION = "released"\n')
    (ws.root / ".gitignore").write_text("runs/\nruns.db*\n")
    ws.write_config(default_config(train=TRAIN, snapshot=True))
    ws.recipe("edited", 'extends = "baseline"\n')  # no knob of its own
    git(ws.root, "init", "-q")
    git(ws.root, "add", "-A")
    git(ws.root, "commit", "-q", "-m", "start")
    ws.cli("queue", "baseline")
    (ws.root / "version.py").write_text('VERSION = "edited trainer"\n')  # the whole method
    ws.cli("queue", "edited")
    ws.cli("worker", "--drain")

    doc = ws.cli_json("compare")
    edited = next(e for e in doc["variants"] if e["name"] == "edited")
    assert edited["code"] != doc["baseline"]["code"]
    text = ws.cli("export-recipe", "edited").stdout
    assert knobs.parse_recipe_env(text, "recipe.env") == {}
    head = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "trains the baseline" not in head
    assert head.count("this recipe.env trains the candidate only with its code snapshot") == 1
    chain = edited["chain_ids"][-1]
    assert head.count(f"`opsdctl code {chain} --to DIR` restores it") == 1 and f"@{edited['code']}" in head
    ws.cli("code", str(chain), "--to", str(tmp_path / "code"))
    assert (tmp_path / "code" / "version.py").read_text() == 'VERSION = "edited trainer"\n'
    # the baseline itself, on its own code: its empty recipe.env is the baseline
    assert "this empty recipe.env trains the baseline" in ws.cli("export-recipe", "baseline").stdout


def test_export_leader_argument_errors(ws):
    for args, words in ((("export-recipe",), "give a VARIANT or --leader"),
                        (("export-recipe", "baseline", "--leader"), "give a VARIANT or --leader"),
                        (("export-recipe", "--leader", "--all-keys"), "--all-keys needs a named VARIANT")):
        r = ws.cli(*args, check=False)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_export_leader_with_nothing_scored_is_the_released_recipe(ws):
    r = ws.cli("export-recipe", "--leader")
    assert knobs.parse_recipe_env(r.stdout, "recipe.env") == {}
    assert "the baseline's empty recipe" in r.stdout
