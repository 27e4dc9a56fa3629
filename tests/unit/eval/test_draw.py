"""A fresh draw of eval samples (OPSD_EVAL_DRAW): its seed, the environment variable, the seed
resolved with it, and a resume of another draw refused. The evaluator run twice: integration
test_eval_e2e.py."""

from __future__ import annotations

import json

import pytest

from eval import plan
from eval.cli import build_parser, main, resolve
from eval.settings import EvalSettings, check_resume
from opsdctl.errors import UserError

SEEDS = (0, 1, 42, 2**31 - 2, 2**31 - 1, 2**40, -5)


def test_draw_seed_is_stable_and_draw_zero_is_the_seed():
    assert plan.draw_seed(0, 1) == 1738700583  # pinned: a changed hash would re-draw every re-eval's samples
    assert plan.draw_seed(0, 1) == plan.draw_seed(0, 1) and plan.draw_seed(0, 1) != plan.draw_seed(1, 1)
    for seed in SEEDS:
        assert plan.draw_seed(seed, 0) == seed
    with pytest.raises(ValueError):
        plan.draw_seed(0, -1)


@pytest.mark.parametrize("seed", SEEDS)
def test_draws_0_to_1000_are_distinct_31_bit_seeds_never_the_seed_itself(seed):
    drawn = [plan.draw_seed(seed, n) for n in range(1, 1001)]
    assert len(set(drawn)) == 1000 and seed not in drawn
    assert all(0 <= s < 2**31 for s in drawn)


def test_a_draw_steps_over_the_seed_its_hash_lands_on(monkeypatch):
    """The hash's value v taken as it is would repeat draw 0 when seed == v: the draw moves to v + 1,
    and the values above v's seed keep their place, so draws stay distinct."""
    v = 123_456

    class _Fixed:  # sha256 whose first 8 bytes are v
        def __init__(self, _data):
            pass

        def digest(self):
            return v.to_bytes(8, "big") + bytes(24)

    monkeypatch.setattr(plan.hashlib, "sha256", _Fixed)
    assert plan.draw_seed(v, 1) == v + 1 and plan.draw_seed(0, 1) == v + 1  # seed <= v: stepped over
    assert plan.draw_seed(v + 1, 1) == v and plan.draw_seed(-3, 1) == v  # seed above v or negative: as hashed


# --- the environment variable, before anything loads ------------------------------------------


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "+1", "0x1", "1 2", "²"])
def test_a_bad_draw_is_one_line_naming_the_variable_and_writes_nothing(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv("OPSD_EVAL_DRAW", value)
    out = tmp_path / "never"
    rc = main(["--profile", "tiny", "--gpus", "", "--output-dir", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: OPSD_EVAL_DRAW=") and "whole number 0 or more" in err[0]
    assert not out.exists()


def _resolved(tmp_path, monkeypatch, draw: str | None, *extra: str) -> EvalSettings:
    """resolve() on a two-problem benchmark file and the tiny model's name (nothing is built)."""
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i} + 1?", "answer": i + 1}) + "\n"
                             for i in range(2)))
    if draw is None:
        monkeypatch.delenv("OPSD_EVAL_DRAW", raising=False)
    else:
        monkeypatch.setenv("OPSD_EVAL_DRAW", draw)
    args = build_parser().parse_args(["--profile", "tiny", "--model", "tiny://model", "--benchmark", str(bench),
                                      "--num-problems", "2", "--gpus", "", "--output-dir", str(tmp_path / "o"),
                                      *extra])
    return resolve(args)[0]


def test_the_draw_turns_the_resolved_seed_whatever_seed_says(tmp_path, monkeypatch):
    profile_seed = _resolved(tmp_path, monkeypatch, None).seed
    for text in ("", "0", " 0 "):  # absent or 0: the seed as today
        s = _resolved(tmp_path, monkeypatch, text)
        assert (s.seed, s.draw) == (profile_seed, 0)
    s = _resolved(tmp_path, monkeypatch, " 2 ")
    assert (s.seed, s.draw) == (plan.draw_seed(profile_seed, 2), 2)
    s = _resolved(tmp_path, monkeypatch, "3", "--seed", "7")
    assert (s.seed, s.draw) == (plan.draw_seed(7, 3), 3) and s.seed != plan.draw_seed(profile_seed, 3)
    assert s.to_dict()["draw"] == 3 and s.sampling()["seed"] == s.seed  # recorded, and what the engines get


# --- resume --------------------------------------------------------------------------------


def test_a_resume_of_another_draw_is_refused(tmp_path, monkeypatch):
    first = _resolved(tmp_path, monkeypatch, None)
    again = _resolved(tmp_path, monkeypatch, "1")
    with pytest.raises(UserError, match=r"started with draw=0 but this run has draw=1") as exc:
        check_resume(first.to_dict(), again, "settings.json")
    assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match=r"started with draw=1 but this run has draw=0"):
        check_resume(again.to_dict(), first, "settings.json")
    check_resume(again.to_dict(), _resolved(tmp_path, monkeypatch, "1"), "settings.json")  # same draw: resumes


def test_a_dir_written_before_draws_existed_resumes_as_draw_0(tmp_path, monkeypatch):
    first = _resolved(tmp_path, monkeypatch, None)
    old = {k: v for k, v in first.to_dict().items() if k != "draw"}
    check_resume(old, first, "settings.json")
    with pytest.raises(UserError, match="draw=0 but this run has draw=1"):
        check_resume(old, _resolved(tmp_path, monkeypatch, "1"), "settings.json")
