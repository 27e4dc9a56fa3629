"""GPU slots (opsdctl.plan.slots) and the layout rule (config.check_gpu_layout): slots, chains at
once, a stage's own GPU count, and the one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsdctl.config import check_gpu_layout, config_from_dict
from opsdctl.errors import UserError
from opsdctl.plan.slots import Layout, layout_of


def test_slots_and_chains_at_once():
    assert Layout().max_chains == 1 and Layout().serial and Layout().gpus_of("train") == 0
    whole = Layout((0, 1, 2, 3))
    assert whole.slots == ((0, 1, 2, 3),) and whole.max_chains == 1 and whole.gpus_of("eval") == 4
    ones = Layout((0, 1, 2, 3), 1)
    assert ones.slots == ((0,), (1,), (2,), (3,)) and ones.max_chains == 4 and not ones.serial
    pairs = Layout((4, 5, 6, 7), 2)
    assert pairs.slots == ((4, 5), (6, 7)) and pairs.max_chains == 2
    mixed = Layout((0, 1, 2, 3), None, (("eval", 1),))
    assert mixed.gpus_of("train") == 4 and mixed.gpus_of("eval") == 1 and mixed.max_chains == 4
    assert "up to 4 chains at once in 4 slot(s) of 1 GPU(s): 0, 1, 2, 3" in ones.describe()
    assert whole.describe() == "one chain at a time on GPUs 0,1,2,3"


@pytest.mark.parametrize("n, per_chain, stage_gpus, words", [
    (4, 3, {}, "gpus_per_chain = 3 does not divide the 4 devices of [gpus] devices: chains run on disjoint groups"),
    (4, 8, {}, "gpus_per_chain = 8: must be between 1 and the 4 device(s) of [gpus] devices (1, 2, 4)"),
    (4, 0, {}, "gpus_per_chain = 0: must be between 1 and the 4"),
    (0, 1, {}, "gpus_per_chain = 1 but [gpus] devices = []"),
    (4, None, {"eval": 3}, "[stages.eval] gpus = 3 does not divide the 4 device(s)"),
    (2, None, {"train": 4}, "[stages.train] gpus = 4 does not divide the 2 device(s)"),
    (0, None, {"eval": 1}, "[stages.eval] gpus = 1 but [gpus] devices = []"),
])
def test_layouts_the_devices_cannot_hold_are_refused_in_one_line(n, per_chain, stage_gpus, words):
    with pytest.raises(UserError) as err:
        check_gpu_layout(n, per_chain, stage_gpus, "local", "opsdctl.toml")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_ray_keeps_its_meaning_and_refuses_a_stage_count():
    assert check_gpu_layout(0, 0, {}, "ray", "x") == 1  # 0: chains without GPUs on Ray
    with pytest.raises(UserError, match=r"\[stages.eval\] gpus is for the local executor"):
        check_gpu_layout(4, 2, {"eval": 1}, "ray", "x")


def test_config_checks_the_layout_at_load_and_layout_of_after_all_is_counted():
    cfg = config_from_dict({"gpus_per_chain": 2, "gpus": {"devices": [0, 1, 2, 3]}, "stages": {"eval": {"gpus": 1}}},
                           Path("/tmp"))
    lay = layout_of(cfg, (0, 1, 2, 3))
    assert lay == Layout((0, 1, 2, 3), 2, (("eval", 1),)) and lay.max_chains == 4
    every = config_from_dict({"gpus_per_chain": 3, "gpus": {"devices": "all"}}, Path("/tmp"))  # counted later
    with pytest.raises(UserError, match="gpus_per_chain = 3 does not divide the 4 devices"):
        layout_of(every, (0, 1, 2, 3))
    shared = {"snapshot_code": False, "stages": {"train": {"recipe_env_path": "sub/recipe.env"}}}
    with pytest.raises(UserError, match="with 2 chains at once .* needs snapshot_code = true"):
        config_from_dict({**shared, "gpus_per_chain": 1, "gpus": {"devices": [0, 1]}}, Path("/tmp"))
    later = config_from_dict({**shared, "gpus_per_chain": 1, "gpus": {"devices": "all"}}, Path("/tmp"))
    with pytest.raises(UserError, match="with 2 chains at once .* needs snapshot_code = true"):
        layout_of(later, (0, 1))
    assert layout_of(config_from_dict(shared, Path("/tmp")), ()).serial  # one at a time: one recipe file is fine
