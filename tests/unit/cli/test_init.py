"""`opsdctl init` writes the profile's seed rule into `[queue]`, with the reason as a comment."""

from __future__ import annotations

import re

from opsdctl.config import load_config


def test_init_writes_the_choice_with_a_comment(tmp_path):
    from opsdctl.cli.init import init_workspace

    for profile, seed, same in (("qwen3-1.7b", 42, True), ("tiny", 0, False)):
        d = tmp_path / profile
        init_workspace(d, profile, copy_recipes=False)
        text = (d / "opsdctl.toml").read_text()
        section = text[text.index("[queue]"):text.index("[worker]")]
        assert re.search(rf"^seed = {seed}\s+#", section, re.M) and re.search(rf"^same_seed = {str(same).lower()}\s+#",
                                                                              section, re.M), section
        assert ("scorer's protocol" in section) == same
        assert load_config(d / "opsdctl.toml").seed_policy() == (seed, same)
