"""Repeats seeded as the scorer does: in the qwen3-1.7b profile every repeat runs at seed 42 by
default; `queue --seed`, `--same-seed` and `--seed-per-repeat` still work; `[queue]` overrides the
profile; the worker's auto-repeats follow the same rule. Real CLI, real SQLite."""

from __future__ import annotations

import pytest
from conftest import default_config

from opsdctl.config import load_config
from opsdctl.plan.store_facts import StoreFacts
from opsdctl.store.engine import open_store


def _qwen(ws, queue: str = ""):
    text = default_config().replace('profile = "tiny"', 'profile = "qwen3-1.7b"')
    ws.write_config(text + queue)


def _seeds(rows):
    return [r["seed"] for r in rows]


def test_qwen_profile_repeats_at_seed_42_and_the_flags_still_work(ws):
    _qwen(ws)
    assert _seeds(ws.cli_json("queue", "baseline", "--repeats", "3")) == [42, 42, 42]
    assert _seeds(ws.cli_json("queue", "token-clip", "--repeats", "2", "--seed", "7")) == [7, 7]
    # repeat r at seed S + r (repeats 0, 1 of cosine)
    assert _seeds(ws.cli_json("queue", "cosine", "--repeats", "2", "--seed-per-repeat")) == [42, 43]
    assert _seeds(ws.cli_json("queue", "cosine", "--repeats", "2", "--seed", "100", "--same-seed")) == [100, 100]
    assert ws.sql("select seed from chain where id = 1") == [(42,)]


def test_tiny_profile_keeps_one_seed_per_repeat(ws):
    assert _seeds(ws.cli_json("queue", "baseline", "--repeats", "3")) == [0, 1, 2]
    assert _seeds(ws.cli_json("queue", "cosine", "--repeats", "2", "--same-seed", "--seed", "3")) == [3, 3]


def test_queue_section_overrides_the_profile(ws):
    ws.write_config(default_config() + "\n[queue]\nseed = 5\nsame_seed = true\n")
    assert _seeds(ws.cli_json("queue", "baseline", "--repeats", "2")) == [5, 5]
    assert _seeds(ws.cli_json("queue", "cosine", "--repeats", "2", "--seed-per-repeat")) == [5, 6]
    _qwen(ws, "\n[queue]\nsame_seed = false\n")
    assert _seeds(ws.cli_json("queue", "token-clip", "--repeats", "2")) == [42, 43]


@pytest.mark.parametrize("body, words", [
    ("seed = -1", "[queue] seed = -1: must be an integer >= 0"),
    ("same_seed = 1", "[queue] same_seed = 1: must be true or false"),
    ("sead = 42", "unknown key (did you mean seed?)"),
])
def test_bad_queue_section_is_refused_in_one_line(ws, body, words):
    ws.write_config(default_config() + f"\n[queue]\n{body}\n")
    res = ws.cli("queue", "baseline", check=False)
    assert res.returncode == 2 and words in " ".join(res.stderr.split()), res.stderr
    assert not ws.db.exists() or ws.sql("select count(*) from chain") == [(0,)]


def test_auto_repeat_follows_the_seed_rule(ws):
    _qwen(ws)
    ws.cli("queue", "baseline", "--seed", "9")
    cfg = load_config(ws.root / "opsdctl.toml")
    info = StoreFacts(cfg, open_store(cfg.db)).queue_repeat("baseline", "settle it")
    assert info.seed == 9  # the same seed as the variant's runs, as the scorer re-trains
    ws.write_config(default_config())  # tiny: a fresh seed
    cfg = load_config(ws.root / "opsdctl.toml")
    assert StoreFacts(cfg, open_store(cfg.db)).queue_repeat("baseline", "settle it").seed == 10
