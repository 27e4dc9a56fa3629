"""opsdctl.toml: paths resolve against the file, the setup offset and family keys, the starter
configs load."""

from __future__ import annotations

import pytest

from opsdctl.config import config_from_dict, load_config, starter_config


# --- config -------------------------------------------------------------------------------


def test_config_paths_resolve_against_the_file(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "opsdctl.toml"
    path.write_text('db = "sqlite:///data/runs.db"\nruns_dir = "out"\n[budget]\nremaining_file = ".timer/remaining_secs"\n')
    monkeypatch.chdir(tmp_path)
    cfg = load_config(path)
    assert cfg.db == f"sqlite:///{tmp_path}/cfg/data/runs.db" and cfg.runs_dir == tmp_path / "cfg" / "out"
    assert cfg.budget.remaining_file == tmp_path / "cfg" / ".timer" / "remaining_secs"
    assert cfg.stages["train"].command.startswith("{python} -m trainer")  # the profile's default
    pg = config_from_dict({"db": "postgresql+psycopg://u:secret@h/db"}, tmp_path)
    assert pg.db == "postgresql+psycopg://u:secret@h/db"


def test_offset_and_family_keys(tmp_path):
    (tmp_path / "opsdctl.toml").write_text(
        '[baseline]\nreference = { mean = 54.22, sd = 1.48, n = 5, offset_sd = 0.5 }\n'
        '[compare]\nfamily = "since:2025-06-01T09:00"\n')
    cfg = load_config(tmp_path / "opsdctl.toml")
    assert cfg.reference.offset_sd == 0.5 and cfg.section("compare")["family"] == "since:2025-06-01T09:00"
    (tmp_path / "opsdctl.toml").write_text('[compare]\nfamily = ["a", "b"]\n')
    assert load_config(tmp_path / "opsdctl.toml").section("compare")["family"] == ["a", "b"]


@pytest.mark.parametrize("profile", ["tiny", "qwen3-1.7b"])
def test_starter_configs_load(tmp_path, profile):
    (tmp_path / "opsdctl.toml").write_text(starter_config(profile))
    cfg = load_config(tmp_path / "opsdctl.toml")
    train, ev = cfg.stages["train"].command, cfg.stages["eval"].command
    tail = "-m trainer --profile {profile} --recipe {recipe_json} --seed {seed} --output-dir {stage_dir}"
    if profile == "tiny":
        assert train == "{python} " + tail and cfg.devices == [] and cfg.reference is None
    else:
        assert train == "{python} -m accelerate.commands.launch --num_processes {num_gpus} " + tail
        assert cfg.devices == [0, 1, 2, 3] and (cfg.reference.mean, cfg.reference.sd, cfg.reference.n) == (54.22, 1.48, 5)
        assert cfg.reference.offset_sd == 1.0  # the setup offset's default
    assert cfg.section("compare")["family"] == "all"
    assert ev == ("{python} -m eval --profile {profile} --adapter {checkpoint} --num-problems {num_problems} --k {k} "
                  "--output-dir {stage_dir} --gpus {gpus}")
    assert cfg.stages["train"].checkpoint == "{stage_dir}/checkpoint-final" and cfg.profile == profile
