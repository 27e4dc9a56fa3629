"""benchmarks/throughput/eval_model.py: the scheduler against a hand-worked run and against its own
step-by-step mode, the closed-form jumps, the cost fit against known coefficients (float64), and
the length law."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from support.bench_import import bench_module


@pytest.fixture(scope="module")
def em():
    return bench_module("throughput.eval_model")


def two_requests(em, prompt=4, target=8):
    """One problem, one micro-batch of two samples."""
    lengths = {("p", 0): target, ("p", 1): target}
    work = em.plan_workload(["p"], 2, 0, [prompt], lengths)
    assert [b.samples for b in work.batches] == [(0,), (1,)]  # k = 2: rounds of one sample
    work.batches = [em.Batch("p#0", 0, "p", 0, (0, 1), (1, 2))]  # both samples in one batch
    return work


def test_a_preemption_worked_by_hand(em):
    # 4 blocks of 4 tokens; two requests of prompt 4, 8 tokens each. Step 1 prefills both (1 block
    # each), steps 2-5 decode (a second block each at ctx 5), step 6 finds no block for A's third:
    # B (the latest admitted) is preempted, A goes on; A ends at step 8; B recomputes its 9 tokens
    # at step 9 (3 blocks) and ends at step 11.
    work = two_requests(em)
    spec = em.EngineSpec(max_seqs=2, kv_blocks=4, block_size=4, token_budget=1000)
    steps = em.simulate(work, spec, em.StepCost(1, 0, 0, 0, 0))
    assert steps.wall_s == 11 and steps.engines[0].steps == 11 and steps.engines[0].preemptions == 1
    assert steps.tokens == 16 and steps.samples == 2
    prefill = em.simulate(work, spec, em.StepCost(0, 0, 0, 0, 1))
    assert prefill.wall_s == 4 + 4 + 9  # both prompts, then B's recompute
    pairs = em.simulate(work, spec, em.StepCost(0, 0, 0, 0, 0, per_pair=1))
    assert pairs.wall_s == 2 * (4 * 5 // 2) + 9 * 10 // 2


def test_context_cost_is_the_sum_over_steps(em):
    # one request, prompt 10, 100 tokens: step j holds 10 + j tokens after it (j = 1..100)
    work = em.plan_workload(["p"], 1, 0, [10], {("p", 0): 100})
    spec = em.EngineSpec(max_seqs=4, kv_blocks=1000, block_size=16)
    ctx = em.simulate(work, spec, em.StepCost(0, 0, 1, 0, 0))
    assert ctx.wall_s == pytest.approx(sum(10 + j for j in range(1, 101)), rel=1e-12)
    gen = em.simulate(work, spec, em.StepCost(0, 0, 0, 1, 0))
    assert gen.wall_s == pytest.approx(sum(range(1, 101)), rel=1e-12)
    seq = em.simulate(work, spec, em.StepCost(0.5, 2, 0, 0, 0))
    assert seq.wall_s == pytest.approx(100 * 2.5, rel=1e-12)


def random_work(em, seed, problems=7, k=12, law=None):
    law = law or em.LengthLaw(median=60, problem_sigma=0.7, sample_sigma=0.4, cap=240, min_tokens=2)
    ids = [f"q{i}" for i in range(problems)]
    rng = random.Random(seed)
    return em.plan_workload(ids, k, seed, [rng.randrange(5, 40) for _ in ids], em.draw_lengths(law, ids, k, seed),
                            proxy=[rng.random() for _ in ids])


@pytest.mark.parametrize("seed, engines, kv_blocks, budget", [(0, 1, 40, 64), (1, 1, 400, 4096), (2, 3, 50, 100),
                                                              (3, 2, 40, 32), (4, 4, 1000, 8192)])
def test_closed_form_jumps_equal_stepping_one_at_a_time(em, monkeypatch, seed, engines, kv_blocks, budget):
    work = random_work(em, seed)
    spec = em.EngineSpec(max_seqs=16, kv_blocks=kv_blocks, block_size=8, token_budget=budget)
    cost = em.StepCost(0.004, 1e-4, 3e-7, 2e-7, 1e-5, 1e-9)
    fast = em.simulate(work, spec, cost, engines=engines)
    monkeypatch.setattr(em._Engine, "jump", lambda self, until=math.inf: False)
    slow = em.simulate(work, spec, cost, engines=engines)
    assert fast.wall_s == pytest.approx(slow.wall_s, rel=1e-9)
    assert [(e.steps, e.tokens, e.preemptions, e.finished) for e in fast.engines] == \
        [(e.steps, e.tokens, e.preemptions, e.finished) for e in slow.engines]
    assert fast.tokens == work.tokens and fast.samples == work.samples
    if kv_blocks <= 50:
        assert sum(e.preemptions for e in fast.engines) > 0  # the tight caches did preempt


def test_a_run_cut_short_counts_what_was_generated_by_then(em, monkeypatch):
    work = random_work(em, 5)
    spec = em.EngineSpec(max_seqs=16, kv_blocks=60, block_size=8, token_budget=256)
    cost = em.StepCost(0.01, 1e-4, 1e-6, 0, 1e-5)
    whole = em.simulate(work, spec, cost)
    cuts = [em.simulate(work, spec, cost, until_s=f * whole.wall_s) for f in (0.2, 0.5, 0.8)]
    assert all(c.stopped_early for c in cuts) and [c.wall_s for c in cuts] == [f * whole.wall_s for f in (0.2, 0.5, 0.8)]
    assert 0 < cuts[0].tokens < cuts[1].tokens < cuts[2].tokens < whole.tokens
    monkeypatch.setattr(em._Engine, "jump", lambda self, until=math.inf: False)
    slow = em.simulate(work, spec, cost, until_s=0.5 * whole.wall_s)
    assert abs(slow.tokens - cuts[1].tokens) <= 16  # the last step may overshoot by one step of <= max_seqs tokens
    assert em.simulate(work, spec, cost, until_s=2 * whole.wall_s).tokens == whole.tokens


def test_more_engines_share_the_work(em):
    work = random_work(em, 6, problems=12)
    spec = em.EngineSpec(max_seqs=8, kv_blocks=10_000, block_size=16)
    cost = em.StepCost(0.01, 0, 0, 0, 0)
    one, four = em.simulate(work, spec, cost, engines=1), em.simulate(work, spec, cost, engines=4)
    assert sum(e.finished for e in four.engines) == work.samples and all(e.finished for e in four.engines)
    assert four.wall_s < one.wall_s / 2  # base-only steps: four engines do the same steps in parallel
    longest = max(work.lengths.values())
    assert four.wall_s >= 0.01 * longest  # none ends before its longest sample's tokens


def test_a_sample_larger_than_the_cache_is_refused(em):
    work = em.plan_workload(["p"], 1, 0, [10], {("p", 0): 100})
    with pytest.raises(ValueError, match="cannot fit"):
        em.simulate(work, em.EngineSpec(max_seqs=4, kv_blocks=5, block_size=16), em.StepCost(1, 0, 0, 0, 0))


def test_the_fit_recovers_known_coefficients(em):
    rng = random.Random(0)
    truth = em.StepCost(0.006, 2e-5, 3.5e-8, 1e-8, 2e-5, 1e-10)
    rows = []
    for _ in range(400):
        b = rng.randrange(1, 65)
        ctx = b * rng.randrange(100, 30_000)
        gen = rng.randrange(0, ctx)
        pre = rng.choice([0, 0, 0, rng.randrange(100, 20_000)])
        rows.append((b, ctx, gen, pre, pre * (pre + 1) // 2))
    trace = em.StepTrace(tuple(truth.seconds(*r) for r in rows), *map(tuple, zip(*rows)))
    fit = em.fit_step_cost([trace])
    for name in em.FEATURES:
        assert getattr(fit, name) == pytest.approx(getattr(truth, name), rel=1e-6)
    assert em.trace_seconds(fit, trace) == pytest.approx(sum(trace.seconds), rel=1e-9)
    only = em.fit_step_cost([trace], use=("base", "per_ctx"))
    assert only.per_seq == only.per_gen == only.per_prefill == only.per_pair == 0.0


def test_the_length_law(em):
    ids = [f"p{i}" for i in range(400)]
    law = em.REAL_LAW
    lengths = em.draw_lengths(law, ids, 12, seed=3)
    assert lengths == em.draw_lengths(law, ids, 12, seed=3) != em.draw_lengths(law, ids, 12, seed=4)
    values = list(lengths.values())
    assert all(law.min_tokens <= n <= law.cap for n in values)
    assert statistics.median(values) == pytest.approx(law.median, rel=0.1)
    logs = [math.log(n) for n in values if n < law.cap]  # the spread, away from the cap
    assert statistics.pstdev(logs) == pytest.approx(math.hypot(law.problem_sigma, law.sample_sigma), rel=0.15)
    scaled = em.scale_lengths(lengths, 8)
    assert all(abs(scaled[key] - n / 8) <= 0.5 for key, n in lengths.items())
    assert max(scaled.values()) <= law.scaled(8).cap == law.cap // 8
