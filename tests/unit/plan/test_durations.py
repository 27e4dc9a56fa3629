"""Duration estimates: the rule (pure), the cost key, fallbacks and the store query."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from opsdctl.plan.durations import (
    FEW_FACTOR,
    HIGH_Q,
    QUANTILE_MIN_N,
    TAIL_FACTOR,
    Estimator,
    Sample,
    cost_key,
    estimate_from_samples,
    quantile,
)
from opsdctl.store.open_read import open_reader


def test_cost_key_names_the_knobs_that_change_cost():
    assert cost_key("train", "qwen3-1.7b", {"max_completion_length": 1024, "learning_rate": 1e-5}) == \
        "train|qwen3-1.7b|mcl=1024"
    assert cost_key("train", "qwen3-1.7b", {"max_completion_length": 1024, "learning_rate": 5e-6}) == \
        cost_key("train", "qwen3-1.7b", {"max_completion_length": 1024})
    assert cost_key("train", "qwen3-1.7b", {"max_completion_length": 2048}) != cost_key("train", "qwen3-1.7b", {"max_completion_length": 1024})
    assert cost_key("eval", "qwen3-1.7b", {"max_completion_length": 2048}) == "eval|qwen3-1.7b"


def test_quantile_matches_numpy():
    xs = [3.0, 1.0, 7.5, 2.0, 9.0, 4.0]
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))


def test_the_rule():
    d = 27 * 60.0
    none = estimate_from_samples("eval", "k", [], d)
    assert (none.n, none.median_s, none.high_s, none.source) == (0, d, d, "default")
    few = [1400.0, 1500.0]
    e = estimate_from_samples("eval", "k", few, d)
    assert e.median_s == 1450.0 and e.high_s == pytest.approx(1500.0 * FEW_FACTOR) and e.source == "history"
    many = [1300.0, 1350.0, 1400.0, 1450.0, 1500.0, 1600.0]
    assert len(many) >= QUANTILE_MIN_N
    e = estimate_from_samples("eval", "k", many, d)
    assert e.median_s == statistics.median(many)
    assert e.high_s == pytest.approx(float(np.quantile(many, HIGH_Q)) * TAIL_FACTOR)
    # an unseen setting is never estimated cheaper than a seen one with other knobs
    e = estimate_from_samples("train", "k", [], 19 * 60.0, other=[1500.0])
    assert e.high_s == pytest.approx(1500.0 * FEW_FACTOR) and e.source == "default+other-knobs" and e.median_s == 19 * 60.0


def test_estimator_groups_by_cost_key_and_falls_back():
    k1024 = cost_key("train", "qwen3-1.7b", {"max_completion_length": 1024})
    k2048 = cost_key("train", "qwen3-1.7b", {"max_completion_length": 2048})
    est = Estimator([Sample("train", k1024, 1000.0), Sample("train", k1024, 1100.0),
                     Sample("eval", cost_key("eval", "qwen3-1.7b"), 1500.0)], {"train": 1140.0, "eval": 1620.0})
    tr, ev = est.chain("qwen3-1.7b", {"max_completion_length": 1024})
    assert tr.n == 2 and tr.high_s == pytest.approx(1100 * FEW_FACTOR)
    assert ev.n == 1 and ev.high_s == pytest.approx(1500 * FEW_FACTOR)
    other = est.stage("train", "qwen3-1.7b", {"max_completion_length": 2048})
    assert other.key == k2048 and other.n == 0 and other.high_s == pytest.approx(1265.0)  # 1100 x 1.15 > 1140
    tiny = est.stage("train", "tiny", {"max_completion_length": 1024})
    assert tiny.source == "default" and tiny.high_s == 1140.0  # other profiles never count


def test_history_reads_the_latest_stages_oldest_first_with_each_variants_knobs(tmp_path):
    from datetime import timedelta

    from opsdctl.plan.durations import history
    from opsdctl.store.engine import open_store
    from opsdctl.store.models import Chain, Stage, Variant, utcnow

    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    t0 = utcnow()
    with store.write() as s:
        s.add(Variant(id=1, name="a", hash="ha", hparams={"max_completion_length": 1024}))
        s.add(Variant(id=2, name="b", hash="hb", hparams={"max_completion_length": 2048}))
        s.flush()
        for cid in range(1, 6):
            s.add(Chain(id=cid, variant_id=1 + cid % 2, state="succeeded", profile="qwen3-1.7b"))
        s.flush()
        for cid in range(1, 6):
            s.add(Stage(chain_id=cid, name="train", state="succeeded", started_at=t0, seconds=100.0 * cid))
            s.add(Stage(chain_id=cid, name="eval", state="failed", started_at=t0 + timedelta(seconds=1), seconds=5.0))
    got = history(open_reader(store))
    assert [x.seconds for x in got] == [100.0, 200.0, 300.0, 400.0, 500.0]  # failed stages never count
    assert [x.key for x in got[:2]] == [cost_key("train", "qwen3-1.7b", {"max_completion_length": 2048}),
                                        cost_key("train", "qwen3-1.7b", {"max_completion_length": 1024})]
    assert [x.chain_id for x in history(open_reader(store), limit=2)] == [4, 5]  # the latest, oldest first
    store.dispose()
