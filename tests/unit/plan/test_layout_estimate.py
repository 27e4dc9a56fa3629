"""benchmarks/layout_estimate.py: its pure pieces against direct computations (the log-batch
interpolation, a share's arithmetic, the decode fit in float64, the eval model's linearity in its
costs against a direct simulation, chains per session by hand), and the layout factors in
opsdctl/plan/layout_costs.py against the committed GPU run (8 GPUs: the estimate), so they cannot
drift apart."""

from __future__ import annotations

import json
import math
import sys

import pytest

from conftest import REPO
from opsdctl.plan import layout_costs


@pytest.fixture(scope="module")
def le():
    saved = list(sys.path)
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import layout_estimate

        yield layout_estimate
    finally:
        sys.path[:] = saved


def test_factors_in_code_are_the_measured_figures():
    """1 and 2 GPUs: each stage's wall on k GPUs over its wall on 4 in the committed GPU run; 8 GPUs
    (not run): the committed estimate's."""
    run = json.loads((REPO / "benchmarks" / "results" / "throughput_h100.json").read_text())
    est = json.loads((REPO / "benchmarks" / "results" / "layout_estimate.json").read_text())
    assert est["kind"] == "estimate" and layout_costs.MEASURED is True
    walls = {lay["gpus_per_chain"]: lay for lay in run["layouts"]}
    for stage in ("train", "eval"):
        assert set(layout_costs.FACTORS[stage]) == {1, 2, 4, 8}
        for g in (1, 2, 4):
            ratio = walls[g][f"{stage}_wall_min"] / walls[4][f"{stage}_wall_min"]
            assert layout_costs.FACTORS[stage][g] == pytest.approx(ratio, abs=0.005), (stage, g)
        assert layout_costs.FACTORS[stage][8] == pytest.approx(est["factors"][stage]["8"], abs=0.005)
    assert est["factors"] == est["gpus"][est["factors_gpu"]]["factors"]


def test_log_batch_interpolation_by_hand(le):
    pts = ((4, 3.0), (16, 3.5), (64, 4.9))
    for b, t in pts:
        assert le.log_batch_interp(pts, b) == pytest.approx(t, abs=1e-12)
    assert le.log_batch_interp(pts, 8) == pytest.approx(3.25, abs=1e-12)  # halfway between 4 and 16 on log(b)
    assert le.log_batch_interp(pts, 32) == pytest.approx(4.2, abs=1e-12)
    w = math.log(128 / 16) / math.log(64 / 16)  # beyond the end: the last segment's line
    assert le.log_batch_interp(pts, 128) == pytest.approx(3.5 + w * 1.4, abs=1e-12)
    assert le.log_batch_interp(list(reversed(pts)), 8) == pytest.approx(3.25, abs=1e-12)
    with pytest.raises(ValueError):
        le.log_batch_interp(pts[:1], 8)


def test_share_scales_rollout_by_the_curve_and_training_by_rows(le):
    m = le.MeasuredShare(rows=8, rollout_s=2.0, train_s=1.0, first_extra_s=0.5)
    pts = ((4, 3.0), (16, 3.5), (64, 4.9))
    same = le.share_for(8, m, pts)
    assert (same.rollout_s, same.train_s, same.step_s, same.first_step_s) == pytest.approx((2.0, 1.0, 3.0, 3.5))
    assert same.source == "measured"
    one = le.share_for(32, m, pts, decode_ratio=3.35 / 4.8, flop_ratio=1.0)
    assert one.rollout_s == pytest.approx(2.0 * (4.2 / 3.25) * 4.8 / 3.35, rel=1e-12)
    assert one.train_s == pytest.approx(4.0, rel=1e-12) and one.step_s == pytest.approx(one.rollout_s + 4.0)
    assert one.rows == 32 and "estimated" in one.source


def test_decode_fit_recovers_known_coefficients_in_float64(le):
    base, per_ctx = 2.5e-3, 4.0e-8
    pts = tuple((b, le.decode_seconds(base, per_ctx, b)) for b in (4, 16, 64))
    steps, seq_tokens, ctx = le.decode_totals(4)
    assert (steps, seq_tokens) == (1024, 4096)
    assert ctx == sum(4 * (le.TRAIN_PROMPT_TOKENS + i) for i in range(1, 1025))  # each step reads what is held
    got = le.fit_decode_cost(pts)
    assert got == pytest.approx((base, per_ctx), rel=1e-9)


def test_one_engine_wall_is_linear_in_the_costs_as_a_direct_simulation_says(le):
    em = le.em
    ids = ["a", "b", "c"]
    lengths = {(p, s): 20 + 7 * i + 3 * s for i, p in enumerate(ids) for s in range(6)}
    work = em.plan_workload(ids, 6, 0, [5, 9, 4], lengths)
    spec = em.EngineSpec(max_seqs=4, kv_blocks=40, block_size=4, token_budget=16)  # small: preemptions happen
    totals = le.feature_totals(work, spec)
    cost = em.StepCost(base=1e-3, per_seq=2e-5, per_ctx=3e-7, per_gen=1e-7, per_prefill=5e-6, per_pair=1e-9)
    direct = em.simulate(work, spec, cost)
    assert direct.engines[0].preemptions > 0
    assert le.predicted_seconds(cost, totals) == pytest.approx(direct.wall_s, rel=1e-9)
    tuned = le.calibrate_per_ctx(cost, totals, 1.5 * direct.wall_s)
    assert em.simulate(work, spec, tuned).wall_s == pytest.approx(1.5 * direct.wall_s, rel=1e-9)
    assert (tuned.base, tuned.per_prefill) == (cost.base, cost.per_prefill)


def test_other_gpu_and_kv_cache_arithmetic(le):
    em = le.em
    c = em.StepCost(2.0, 3.0, 4.0, 5.0, 6.0, 7.0)
    slow = le.on_gpu(c, decode_ratio=0.5, flop_ratio=2.0)
    assert slow.to_json() == {"base": 4.0, "per_seq": 6.0, "per_ctx": 8.0, "per_gen": 10.0, "per_prefill": 3.0,
                              "per_pair": 3.5}
    # 10 GiB at share 0.5 of 24 GiB, less 2 GiB: 10 GiB of 112 KiB tokens
    assert le.kv_tokens_on(24 * 1024, 0.5, 2 * 1024) == 10 * 2**30 // em.KV_BYTES_PER_TOKEN


def test_chains_per_session_by_hand(le):
    from throughput.layouts import chains_in_session

    assert chains_in_session(4, 81.6, 360.0) == (4 * 4, pytest.approx(4 * 360 / 81.6))
    assert chains_in_session(1, 46.0, 360.0) == (7, pytest.approx(360 / 46))
    assert chains_in_session(2, 400.0, 360.0) == (0, pytest.approx(1.8))
    factors = {"train": {1: 2.0, 2: 1.5, 4: 1.0}, "eval": {1: 3.0, 2: 1.5, 4: 1.0}}
    got = le.planner_chains(factors, 19.0, 27.0)
    for g, slots in ((1, 4), (2, 2), (4, 1)):
        chain = 19 * factors["train"][g] + 27 * factors["eval"][g]
        assert got[g]["chain_wall_min"] == pytest.approx(chain, abs=0.005)
        assert got[g]["chain_gpu_min"] == pytest.approx(g * chain, abs=0.005)
        assert got[g]["chains_per_6h"] == slots * int(360 // chain)
        assert got[g]["chains_per_6h_fluid"] == pytest.approx(slots * 360 / chain, abs=0.005)
    f = le.factors_from({1: (20.0, 60.0), 4: (10.0, 20.0)})
    assert f == {"train": {1: 2.0, 4: 1.0}, "eval": {1: 3.0, 4: 1.0}}


def test_the_readme_states_the_measured_chains():
    doc = json.loads((REPO / "benchmarks" / "results" / "throughput_h100.json").read_text())
    c, r = doc["chains_per_6h"], doc["chains_per_6h_vs_one_chain_at_a_time"]
    readme = " ".join((REPO / "README.md").read_text().split())
    assert (f"**{c['1']} chains per 6 hours against {c['4']} one at a time ({r['1']:.2f}x; {c['2']} with two GPUs "
            "per chain)**") in readme
    assert "not 2x" in readme and r["1"] < 2.0
