"""One training, one run: a checkpoint's evaluations pooled (opsdctl.stats.pooled_evals), and compare
reading them so (by hand from the counts)."""

import numpy as np

from opsdctl.stats import inference
from opsdctl.stats.compare import Reference, RunRecord, build_report
from opsdctl.stats.pooled_evals import merge

IDS = tuple(f"P{i}" for i in range(6))


def ev(chain_id, counts, *, train_id=None, draw=0, k=12, variant="token-clip", ids=IDS):
    counts = tuple(counts)
    return RunRecord(variant, chain_id, inference.run_score(counts, k), k, len(counts), counts, ids, False,
                     train_id=train_id if train_id is not None else chain_id, draw=draw)


def test_two_draws_of_one_checkpoint_are_one_run_with_their_samples_summed():
    a, b = ev(4, [12, 0, 6, 3, 9, 1]), ev(9, [11, 1, 4, 5, 9, 0], train_id=4, draw=1)
    (one,), notes = merge([a, b])
    assert notes == []
    assert one.chain_id == 4 and one.train_id == 4 and one.k == 24 and one.evals == (4, 9)
    assert one.counts == (23, 1, 10, 8, 18, 1)
    assert abs(one.score - 100.0 * 61 / (6 * 24)) < 1e-12  # avg@24 over the pooled samples
    assert abs(one.score - (a.score + b.score) / 2) < 1e-12  # equal k: the two scores' mean


def test_the_same_draw_again_counts_once_the_latest():
    """An eval run again on the same samples (or a store from before draws) is not new information."""
    a, again = ev(4, [12, 0, 6, 3, 9, 1]), ev(7, [12, 0, 6, 3, 9, 2], train_id=4, draw=0)
    (one,), _ = merge([a, again])
    assert one is again


def test_other_trainings_stay_apart_and_in_order():
    runs = [ev(4, [1] * 6), ev(5, [2] * 6), ev(9, [3] * 6, train_id=4, draw=1)]
    out, _ = merge(runs)
    assert [r.train_id for r in out] == [4, 5] and [r.k for r in out] == [24, 12]


def test_draws_without_counts_keep_the_latest_and_say_so():
    a = RunRecord("token-clip", 4, 55.0, 12, 6, None, None, False, train_id=4)
    b = RunRecord("token-clip", 9, 57.0, 12, 6, None, None, False, train_id=4, draw=1)
    (one,), notes = merge([a, b])
    assert one is b and "chains 4, 9" in notes[0] and "only the latest (chain 9)" in notes[0]


def test_different_problems_are_not_pooled():
    a, b = ev(4, [1] * 6), ev(9, [2] * 6, train_id=4, draw=1, ids=tuple(f"Q{i}" for i in range(6)))
    (one,), notes = merge([a, b])
    assert one is b and notes


def _session(reeval: bool):
    rng = np.random.default_rng(3)
    runs, cid = [], 0
    for variant in ("baseline", "token-clip", "cosine"):
        for _ in range(3):
            cid += 1
            runs.append(ev(cid, rng.integers(0, 13, 30), variant=variant, ids=tuple(f"P{i}" for i in range(30))))
    if reeval:
        runs.append(ev(cid + 1, rng.integers(0, 13, 30), train_id=4, draw=1, variant="token-clip",
                       ids=tuple(f"P{i}" for i in range(30))))
    return runs


def test_compare_counts_a_reevaluated_checkpoint_as_one_run_with_less_eval_noise():
    ref = Reference(mean=54.22, sd=1.48, n=5)
    before = build_report(_session(False), baseline="baseline", reference=ref)
    after = build_report(_session(True), baseline="baseline", reference=ref)
    (e0,) = [e for e in before.full if e.name == "token-clip"]
    (e1,) = [e for e in after.full if e.name == "token-clip"]
    assert e0.n == e1.n == 3 and e1.chain_ids == e0.chain_ids  # still three trainings
    pooled = [r for r in _session(True) if r.train_id == 4]
    counts = np.sum([r.counts for r in pooled], axis=0)
    assert abs(e1.runs[0] - 100.0 * counts.sum() / (30 * 24)) < 1e-9
    assert e1.k == 12  # the protocol's samples per problem, not the pooled run's
    # the pooled run's V_r is about half; the noise split's one-eval V_eval stays on the protocol's scale
    assert after.noise.runs_with_counts == before.noise.runs_with_counts
    assert abs(after.noise.v_eval - before.noise.v_eval) < 0.25 * before.noise.v_eval
