"""A new user's mishaps with listings: `opsdctl recipes` exits 1 when it lists an invalid recipe
(scripts and CI notice); `diff A B --patch` outside git says why it prints no patch. Real CLI, real
SQLite store, real subprocess stages. (The auto-export header's evidence: tests/unit/run/.)"""

from __future__ import annotations

import json

from conftest import default_config


def test_recipes_exits_1_when_it_lists_an_invalid_recipe(ws):
    assert ws.cli("recipes").returncode == 0
    ws.recipe("broken", 'name = "broken"\n[hparams]\nlora_r = 1024\n')
    proc = ws.cli("recipes", check=False)
    assert proc.returncode == 1
    assert "broken" in proc.stdout and "1 of" in proc.stderr and "invalid" in proc.stderr
    as_json = ws.cli("recipes", "--json", check=False)
    assert as_json.returncode == 1
    rows = {r["name"]: r for r in json.loads(as_json.stdout)}  # the listing is still complete
    assert rows["broken"]["error"] and rows["token-clip"]["error"] is None


def test_diff_patch_outside_git_says_why_it_prints_no_patch(ws):
    ws.write_config(default_config(snapshot=True))  # tmp workspace: not a git repository
    (ws.root / "method.py").write_text("CLIP = 'entry'\n")
    ws.cli("queue", "baseline")
    (ws.root / "method.py").write_text("CLIP = 'token'\n")
    ws.cli("queue", "baseline")
    doc = ws.cli_json("diff", "1", "2", "--patch")
    assert doc["code"]["patch"] is None and "M method.py" in doc["code"]["files"]
    assert "not a git repository" in doc["code"]["note"]
    text = ws.cli("diff", "1", "2", "--patch").stdout
    assert "--patch prints nothing" in " ".join(text.split())
    assert ws.cli_json("diff", "1", "2")["code"]["note"] is None  # without --patch nothing to explain
