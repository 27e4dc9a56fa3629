"""The export header's word on the code (opsdctl.recipes.export): a candidate whose method lives in
its code is trained by its recipe.env only with that code snapshot, said once with the way to
restore it, by `export-recipe NAME` and by `--leader` (opsdctl.daemon.auto_export.render_file)."""

from __future__ import annotations

import pytest

from opsdctl.daemon.auto_export import render_file
from opsdctl.plan.submission import pick_leader
from opsdctl.recipes import knobs
from opsdctl.recipes.export import TrainedCode, code_lines, export_recipe
from opsdctl.store.engine import open_store
from opsdctl.store.models import Chain, Variant
from tests.support.report_doc import report as typed

ONLY_WITH_ITS_CODE = "this recipe.env trains the candidate only with its code snapshot"


def test_code_lines_for_each_place_the_method_lives():
    assert code_lines(None) == [] and code_lines(TrainedCode(None, 3, "def456")) == []
    assert code_lines(TrainedCode("live", 3, None)) == [
        "code: the live code dir (snapshot_code = false); recipe.env carries only hyper-parameters"]
    assert code_lines(TrainedCode("abc123", 3, "abc123")) == [
        "code: tree @abc123, the baseline's own: recipe.env is the whole change"]
    (own,) = code_lines(TrainedCode("abc123", 12, "def456"))
    assert own == ("code: the method lives in code: this recipe.env trains the candidate only with its code snapshot, "
                   "tree @abc123 (the baseline ran on @def456); submit that code with it: "
                   "`opsdctl code 12 --to DIR` restores it")
    (unknown_base,) = code_lines(TrainedCode("abc123", 12, None))
    assert "(the baseline ran on" not in unknown_base and ONLY_WITH_ITS_CODE in unknown_base


@pytest.fixture
def store(tmp_path):
    """A store with `edited`: the released knobs (nothing differs), one succeeded chain (id 1)."""
    st = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    with st.write() as s:
        v = Variant(name="edited", version=1, hash="e" * 16, hparams=knobs.default_hparams(), method=knobs.default_method())
        s.add(v)
        s.flush()
        s.add(Chain(variant_id=v.id, seed=42, state="succeeded", profile="tiny"))
    yield st
    st.dispose()


def _header(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("#"))


def test_a_code_only_candidate_is_not_called_the_baseline(store):
    head = _header(export_recipe(store, "edited", trained=TrainedCode("abc123", 1, "def456")).recipe_env)
    assert "trains the baseline" not in head
    assert head.count(ONLY_WITH_ITS_CODE) == 1 and head.count("`opsdctl code 1 --to DIR`") == 1
    assert "no key differs from the released recipe: the candidate differs from the baseline in its code" in head
    # on the baseline's own code (or none known) the empty recipe.env is the baseline, as before
    for same in (TrainedCode("def456", 1, "def456"), None):
        head = _header(export_recipe(store, "edited", trained=same).recipe_env)
        assert "this empty recipe.env trains the baseline" in head and ONLY_WITH_ITS_CODE not in head


def test_the_leaders_file_says_it_once_and_never_trains_the_baseline(store):
    report = typed({"baseline": {"name": "baseline", "mean": 50.0, "n": 3, "source": "runs", "code": "def456",
                                 "runs": [50.0, 49.5, 50.5],
                                 "forecast": {"mean": 50.0, "low80": 48.0, "high80": 52.0, "p_best": 0.2}},
                    "noise": {"s": 1.48, "nu": 4.0},
                    "variants": [{"name": "edited", "variants": ["edited"], "code": "abc123", "chain_ids": [1],
                                  "n": 3, "mean": 53.0, "verdict": "undecided", "p_beat": 0.9,
                                  "forecast": {"mean": 52.5, "low80": 50.0, "high80": 55.0, "p_best": 0.8}}]})
    leader = pick_leader(report)
    assert leader.variant == "edited"
    text = render_file(store, report, leader, "now", "test")
    head = _header(text)
    assert knobs.parse_recipe_env(text, "recipe.env") == {}
    assert "trains the baseline" not in head and head.count("the method lives in code") == 1
    assert head.count(ONLY_WITH_ITS_CODE) == 1 and head.count("`opsdctl code 1 --to DIR`") == 1
