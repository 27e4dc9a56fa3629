"""`[stages.eval] prestart` defaults on for the built-in evaluator only (a user's script must say it
honours the go)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("section, expect", [
    ("", True),  # the built-in evaluator honours OPSD_GO_FD: on by default
    ("prestart = false\n", False),
])
def test_prestart_defaults_on_for_the_built_in_evaluator_only(tmp_path, section, expect):
    from opsdctl.config import load_config

    path = tmp_path / "opsdctl.toml"
    path.write_text(f'profile = "tiny"\ndb = "sqlite:///runs.db"\n[gpus]\ndevices = []\n[stages.eval]\n{section}')
    assert load_config(path).stages["eval"].prestart is expect
    extra = tmp_path / "extra.toml"  # our evaluator with flags of one's own is still ours
    extra.write_text('profile = "tiny"\ndb = "sqlite:///runs.db"\n[gpus]\ndevices = []\n[stages.eval]\n'
                     f'command = "{{python}} -m eval --profile tiny --adapter {{checkpoint}} --max-new-tokens 64"\n{section}')
    assert load_config(extra).stages["eval"].prestart is expect
    own = tmp_path / "own.toml"
    own.write_text('profile = "tiny"\ndb = "sqlite:///runs.db"\n[gpus]\ndevices = []\n'
                   f'[stages.eval]\ncommand = "bash my_eval.sh {{checkpoint}}"\n{section}')
    assert load_config(own).stages["eval"].prestart is False
