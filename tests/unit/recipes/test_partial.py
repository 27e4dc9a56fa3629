"""Partial evaluations' pure parts: `--partial PROBLEMSxK` parsed into the eval's environment,
their own duration estimates, and our evaluator reading NUM_PROBLEMS / VAL_N."""

from __future__ import annotations

import argparse

import pytest

from opsdctl.errors import UserError
from opsdctl.plan.durations import Estimator, Sample, cost_key
from opsdctl.recipes import partial
from opsdctl.recipes.profiles import get_profile


def test_parse_and_environment():
    tiny = get_profile("tiny")
    s = partial.parse("15x2", tiny)
    assert (s.problems, s.k, s.partial, s.text()) == (15, 2, True, "15x2")
    assert partial.parse(None, tiny) == partial.FULL and not partial.FULL.partial
    assert partial.parse(" 30 x 3 ", tiny).resolved(tiny) == (30, 3)  # fewer samples on every problem
    assert partial.placeholder_values(partial.FULL, get_profile("qwen3-1.7b")) == {"num_problems": 30, "k": 12}
    env = partial.apply_env({"VAL_N": "1", "NUM_PROBLEMS": "9", "X": "y"}, partial.FULL, tiny)
    assert env == {"X": "y"}
    assert partial.apply_env({}, s, tiny) == {"NUM_PROBLEMS": "15", "VAL_N": "2"}


def test_partial_duration_estimates_are_their_own():
    defaults = {"train": 60.0, "eval": 600.0}
    full = [Sample("eval", cost_key("eval", "qwen3-1.7b"), x) for x in (1500.0, 1560.0, 1620.0)]
    est = Estimator(full, defaults)
    # no partial history: the full eval's median scaled by the share of samples, the full eval's high
    e = est.stage("eval", "qwen3-1.7b", partial=(15, 4))
    f = est.stage("eval", "qwen3-1.7b")
    assert e.key == "eval|qwen3-1.7b|partial=15x4" and e.n == 0
    assert e.median_s == pytest.approx(f.median_s * (15 * 4) / (30 * 12)) and e.high_s == f.high_s
    # with history of its own: its own figures, and the full eval's estimate is untouched by it
    est = Estimator(full + [Sample("eval", e.key, x) for x in (200.0, 220.0)], defaults)
    e2 = est.stage("eval", "qwen3-1.7b", partial=(15, 4))
    assert (e2.n, e2.median_s, e2.high_s) == (2, 210.0, pytest.approx(220.0 * 1.15))
    assert est.stage("eval", "qwen3-1.7b") == f
    # an eval-only chain has no train stage
    train, _ = est.chain("qwen3-1.7b", {}, eval_only=True)
    assert train.high_s == 0.0 and train.median_s == 0.0


def test_our_evaluator_reads_num_problems_and_val_n(monkeypatch):
    from eval.cli import _partial_from_env

    monkeypatch.setenv("NUM_PROBLEMS", "15")
    monkeypatch.setenv("VAL_N", "4")
    args = argparse.Namespace(k=None, num_problems=None)
    _partial_from_env(args)
    assert (args.num_problems, args.k) == (15, 4)
    args = argparse.Namespace(k=2, num_problems=3)  # flags win
    _partial_from_env(args)
    assert (args.num_problems, args.k) == (3, 2)
    monkeypatch.setenv("VAL_N", "four")
    with pytest.raises(UserError, match="VAL_N='four'"):
        _partial_from_env(argparse.Namespace(k=None, num_problems=None))
