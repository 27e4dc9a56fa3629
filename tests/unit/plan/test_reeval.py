"""Re-evaluations in the plan: which training a re-eval takes (opsdctl.plan.reeval), who may be
re-evaluated, the adaptive policy queueing one, and the simulated session running it through the
worker's loop with compare pooling it."""

from opsdctl.plan import advise, policy, reeval
from opsdctl.plan.simulate import simulate_session
from opsdctl.stats.compare import RunRecord


def run(chain_id, key, train_id=None, draw=0, partial=False):
    return RunRecord(key, chain_id, 50.0, 12, 30, None, None, partial, train_id=train_id or chain_id, draw=draw)


def test_the_training_with_the_fewest_evals_is_taken_the_latest_on_a_tie():
    runs = [run(1, "a"), run(2, "a"), run(3, "a", train_id=1, draw=1), run(4, "b"), run(5, "b"),
            run(6, "c", partial=True)]
    got = reeval.pick(runs, {1: True, 2: True, 4: True, 5: True, 6: True})
    assert got == {"a": reeval.Target("a", 2, 1), "b": reeval.Target("b", 5, 1)}  # c: a screening look only
    assert reeval.pick(runs, {1: True, 4: True}) == {"a": reeval.Target("a", 1, 2), "b": reeval.Target("b", 4, 1)}
    assert reeval.pick(runs, {}) == {}


def test_only_our_evaluator_on_a_checkpoint_still_there(tmp_path):
    assert reeval.refusal(3, "/usr/bin/python3 -m eval {checkpoint} --output-dir {stage_dir}", str(tmp_path)) is None
    assert "your own command" in reeval.refusal(3, "bash dev_eval.sh {checkpoint}", str(tmp_path))
    assert "is gone" in reeval.refusal(3, "python -m eval {checkpoint}", str(tmp_path / "nope"))
    assert "is gone" in reeval.refusal(3, "python -m eval {checkpoint}", None)


def test_the_adaptive_policy_queues_the_re_eval_advise_ranks_first():
    A, S = advise.Advice, advise.Action
    ranked = [A(S.REEVAL, "a", 25, True, 0.3, chain=4), A(S.REPEAT, "a", 45, True, 0.2), A(S.STOP, None, 0, True, 0.0)]
    inputs = dict(advice=ranked, auto_repeat=True, known_variants=["a"])
    p = policy.plan([], None, policy.PlanInputs(**inputs, reevals=("a",)))
    assert (p.extra, p.extra_reeval, p.extra_first, p.full_eval) == ("a", True, True, ["a"])
    assert "requeue 4 --reeval" in p.extra_why
    # a checkpoint that cannot be evaluated again (a user's eval script): the next action
    p = policy.plan([], None, policy.PlanInputs(**inputs))
    assert (p.extra, p.extra_reeval) == ("a", False) and p.extra_why.startswith("advise: one more run of a")
    # without --auto-repeat the worker queues nothing of its own
    assert policy.plan([], None, policy.PlanInputs(advice=ranked, known_variants=["a"], reevals=("a",))).extra is None


def test_a_simulated_session_runs_re_evals_and_compare_counts_trainings():
    res = simulate_session("adaptive, x1 queue", 1)  # seed 1: advise ranks re-evals (found by running it)
    reevals = [c for c in res.chains if c.eval_only and c.state == "succeeded"]
    assert res.reevals >= 1 and reevals and all(c.auto and c.draw >= 1 for c in reevals)
    trained = {c.variant: 0 for c in res.chains}
    for c in res.chains:
        trained[c.variant] += int(c.state == "succeeded" and not c.eval_only)
    assert {e.name: e.n for e in res.report.full} == {v: n for v, n in trained.items() if n and v != "baseline"}
    pooled = {e.name: e for e in res.report.full}[reevals[0].variant]
    assert reevals[0].train_of in pooled.chain_ids
