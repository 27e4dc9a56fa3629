"""`queue_again`: the `opsdctl queue` line a refused re-queue names (a fresh snapshot at the same seed)."""

from __future__ import annotations

from opsdctl.client.enqueue import queue_again
from opsdctl.store.models import Variant


def test_by_name_when_the_name_finds_the_file_it_was_queued_from(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "token-clip.toml").write_text("")
    v = Variant(name="token-clip", version=1, hash="h", source=str(tmp_path / "recipes" / "token-clip.toml"))
    assert queue_again(v, 43, tmp_path / "recipes") == "opsdctl queue token-clip --seed 43 --same-seed"


def test_by_file_when_the_name_finds_another_or_none(tmp_path):
    (tmp_path / "recipes").mkdir()
    elsewhere = tmp_path / "my dir" / "token-clip.toml"
    v = Variant(name="token-clip", version=1, hash="h", source=str(elsewhere))
    assert queue_again(v, 0, tmp_path / "recipes") == f"opsdctl queue '{elsewhere}' --seed 0 --same-seed"
    (tmp_path / "recipes" / "token-clip.toml").write_text("")  # another file of that name: not the one it ran
    assert queue_again(v, 0, tmp_path / "recipes") == f"opsdctl queue '{elsewhere}' --seed 0 --same-seed"


def test_a_recipe_env_is_queued_with_env_and_its_name(tmp_path):
    v = Variant(name="lr up", version=1, hash="h", source=str(tmp_path / "recipe.env"))
    assert queue_again(v, 42, tmp_path) == f"opsdctl queue --env {tmp_path / 'recipe.env'} --name 'lr up' --seed 42 --same-seed"
