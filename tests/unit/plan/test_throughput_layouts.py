"""benchmarks/throughput/layouts.py: a layout's chain minutes and chains per session, by hand."""

from __future__ import annotations


import pytest

from support.bench_import import bench_module


@pytest.fixture(scope="module")
def lay():
    return bench_module("throughput.layouts")


def test_chain_minutes_and_chains_per_session_by_hand(lay):
    share = lay.TrainShare(rows=8, step_s=4.5, first_step_s=6.0, rollout_s=3.2, train_s=1.3, source="measured")
    starts = lay.Startups(train_ready_s=60.0, train_exit_s=4.0, eval_ready_s=20.0, cold_extra_s=120.0)
    d = lay.layout_durations(4, share, eval_generation_s=600.0, starts=starts, eval_source="predicted")
    train_s = 60 + 6 + 99 * 4.5 + 4
    assert d.train_wall_min == pytest.approx(train_s / 60) and d.train_gpu_min == pytest.approx(4 * train_s / 60)
    assert d.eval_wall_min == pytest.approx(620 / 60) and d.eval_gpu_min == pytest.approx(4 * 620 / 60)
    chain = (train_s + 620) / 60
    assert d.chain_wall_min == pytest.approx(chain) and d.chain_gpu_min == pytest.approx(4 * chain)
    usable = 360 - 2  # the cold starts' extra two minutes, once
    assert d.concurrent_chains == 1 and d.chains_per_6h == int(usable // chain)
    assert d.chains_per_6h_fluid == pytest.approx(usable / chain)
    one = lay.layout_durations(1, lay.TrainShare(32, 9.5, 11.0, 5.0, 4.5, "measured"), 1800.0, starts, "predicted")
    one_chain = (60 + 11 + 99 * 9.5 + 4 + 20 + 1800) / 60
    assert one.concurrent_chains == 4 and one.chains_per_6h == 4 * int(usable // one_chain)
    assert one.to_json()["chain_gpu_min"] == round(one_chain, 2)


def test_the_share_must_be_the_layouts(lay):
    share = lay.TrainShare(8, 4.5, 6.0, 3.2, 1.3, "measured")
    starts = lay.Startups(60.0, 4.0, 20.0, 0.0)
    with pytest.raises(ValueError, match="need a share of 32 rows"):
        lay.layout_durations(1, share, 600.0, starts, "x")
    with pytest.raises(ValueError, match="do not divide"):
        lay.rows_per_gpu(3)
    assert lay.layout_durations(2, lay.TrainShare(8, 1, 1, 1, 0, "m"), 1, starts, "x", global_batch=16).train_rows_per_gpu == 8


def test_interpolated_share_is_linear_in_rows_per_phase(lay):
    low = lay.TrainShare(8, 4.5, 6.0, 3.2, 1.3, "measured")
    high = lay.TrainShare(32, 9.5, 12.0, 4.4, 5.1, "measured")
    mid = lay.interpolate_share(16, low, high)
    assert mid.rollout_s == pytest.approx(3.2 + (4.4 - 3.2) / 3) and mid.train_s == pytest.approx(1.3 + (5.1 - 1.3) / 3)
    assert mid.step_s == pytest.approx(mid.rollout_s + mid.train_s) and mid.rows == 16
    assert mid.first_step_s == pytest.approx(8.0) and "interpolated from 8 and 32 rows" == mid.source
    ends = lay.interpolate_share(32, low, high)
    assert (ends.rollout_s, ends.train_s) == pytest.approx((high.rollout_s, high.train_s))
    with pytest.raises(ValueError):
        lay.interpolate_share(16, high, low)
