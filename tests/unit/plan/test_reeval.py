"""Re-evaluations in the plan: which training a re-eval takes (opsdctl.plan.reeval), who may be
re-evaluated, the adaptive policy queueing one (simulated sessions running it through the worker's
loop: tests/integration/test_sim_reeval.py)."""

from opsdctl.plan import advise, policy, reeval
from opsdctl.stats.compare import RunRecord


def run(chain_id, key, train_id=None, draw=0, partial=False):
    return RunRecord(key, chain_id, 50.0, 12, 30, None, None, partial, train_id=train_id or chain_id, draw=draw)


def test_the_training_with_the_fewest_evals_is_taken_the_latest_on_a_tie():
    runs = [run(1, "a"), run(2, "a"), run(3, "a", train_id=1, draw=1), run(4, "b"), run(5, "b"),
            run(6, "c", partial=True)]
    got = reeval.pick(runs, {1, 2, 4, 5, 6}.__contains__)
    assert got == {"a": reeval.Target("a", 2, 1), "b": reeval.Target("b", 5, 1)}  # c: a screening look only
    assert reeval.pick(runs, {1, 4}.__contains__) == {"a": reeval.Target("a", 1, 2), "b": reeval.Target("b", 4, 1)}
    assert reeval.pick(runs, set().__contains__) == {}


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


def test_a_checkpoint_evaluated_more_often_is_worth_less_to_evaluate_again():
    """tau^2 + v/e -> tau^2 + v/(e+1): the observation a re-eval is worth, by hand."""
    import numpy as np

    from opsdctl.stats.belief import Belief

    b = Belief(("base", "a"), np.zeros(3), np.eye(3), tau2=0.855, v_eval=1.335, family_mean=0.0, family_sd=1.0)
    for e in (1, 2, 3):
        gain = 1 / (0.855 + 1.335 / (e + 1)) - 1 / (0.855 + 1.335 / e)
        assert abs(b.reeval_noise(e) - 1 / gain) < 1e-12
    assert b.reeval_noise(1) < b.reeval_noise(2) < b.reeval_noise(3)
    A = advise.Action
    ranked = advise.rank(b, advise.Costs(2700.0, 1500.0, 2000.0), 6 * 3600.0,
                         reevals={"a": reeval.Target("a", 7, 1), "base": reeval.Target("base", 3, 2)})
    got = {a.variant: a for a in ranked if a.action == A.REEVAL}
    assert got["a"].chain == 7 and got["base"].chain == 3
    assert got["a"].gain == b.gain_run(1, b.reeval_noise(1)) and got["base"].gain == b.gain_run(0, b.reeval_noise(2))
