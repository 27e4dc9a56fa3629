"""Recipe files: the hash is the content only, `extends` by name or relative path, the shipped
recipes, extra method knobs."""

from __future__ import annotations

import pytest
from conftest import REPO

from opsdctl.errors import UserError
from opsdctl.recipes import knobs
from opsdctl.recipes.load import content_hash, load_recipe, recipe_json



# --- recipes ------------------------------------------------------------------------------


def test_recipe_hash_is_content_only(tmp_path):
    (tmp_path / "one.toml").write_text('name = "one"\ndescription = "x"\n[hparams]\nmax_grad_norm = 1\n')
    (tmp_path / "two.toml").write_text('name = "two"\n[hparams]\nmax_grad_norm = 1.0\n[method]\nclip_mode = "entry"\n')
    one, two = load_recipe("one", tmp_path), load_recipe("two", tmp_path)
    assert one.hash == two.hash and one.hparams["max_grad_norm"] == 1.0
    assert list(one.hparams) == list(knobs.HPARAMS) and set(one.method) == set(knobs.METHOD_KNOBS)
    assert one.hash == content_hash(knobs.default_hparams() | {"max_grad_norm": 1.0}, knobs.default_method())
    doc = recipe_json(one.name, 3, one.description, one.hparams, one.method)
    assert doc["version"] == 3 and doc["hash"] == one.hash and set(doc) == {"name", "version", "hash", "description", "hparams", "method"}


def test_extends_by_relative_path_and_chain(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.toml").write_text('[hparams]\nlora_r = 8\n[method]\nclip_mode = "token"\n')
    (tmp_path / "sub" / "mid.toml").write_text('extends = "../base.toml"\n[hparams]\nlora_alpha = 16\n')
    (tmp_path / "leaf.toml").write_text('name = "leaf"\nextends = "./sub/mid.toml"\n[hparams]\nlora_r = 4\n')
    leaf = load_recipe("leaf", tmp_path)
    assert (leaf.hparams["lora_r"], leaf.hparams["lora_alpha"], leaf.method["clip_mode"]) == (4, 16, "token")
    assert [p.name for p in leaf.lineage] == ["leaf.toml", "mid.toml", "base.toml"]
    assert load_recipe(str(tmp_path / "sub" / "mid.toml"), tmp_path).name == "mid"


def test_shipped_recipes():
    base = load_recipe("baseline", REPO / "recipes")
    assert base.hparams == knobs.default_hparams() and base.method == knobs.default_method()
    raw = (REPO / "recipes" / "baseline.toml").read_text()
    for key in knobs.HPARAMS:
        assert f"\n{key} = " in raw, f"baseline.toml must write out {key}"
    expected = {"token-clip": ("method", "clip_mode", "token"), "hard-data": ("method", "data_select", "hard"),
                "cosine": ("hparams", "lr_scheduler_type", "cosine"),
                "teacher-trace": ("method", "teacher_context", "trace")}
    for name, (table, key, value) in expected.items():
        r = load_recipe(name, REPO / "recipes")
        assert getattr(r, table)[key] == value and r.description and r.lineage[1].name == "baseline.toml"
        changed = {k for k in r.hparams if r.hparams[k] != base.hparams[k]} | {k for k in r.method if r.method[k] != base.method[k]}
        assert changed == {key}


def test_extra_method_knobs(tmp_path):
    (tmp_path / "x.toml").write_text('[method]\nmy_clip = 0.3\n')
    with pytest.raises(UserError, match="extra_method_knobs"):
        load_recipe("x", tmp_path)
    r = load_recipe("x", tmp_path, extra_method_knobs=("my_clip",))
    assert r.method["my_clip"] == 0.3
