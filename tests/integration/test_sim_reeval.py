"""Re-evaluations through whole simulated sessions: the adaptive policy's re-evals run through the
worker's loop and compare pools them per training; a re-eval fills the time the user's last chains
cannot use; auto-repeat never queues what admission skips. Pure and in process, but seconds of
CPU: here, not in the unit loop (tests/unit/plan/test_reeval.py holds the rules)."""

from opsdctl.sim.replay import simulate_session


def test_a_simulated_session_runs_re_evals_and_compare_counts_trainings():
    res = simulate_session("adaptive, x1 queue", 3)  # seed 3: advise ranks re-evals (found by running it)
    reevals = [c for c in res.chains if c.eval_only and c.state == "succeeded"]
    assert res.reevals >= 1 and reevals and all(c.auto and c.draw >= 1 for c in reevals)
    trained = {c.variant: 0 for c in res.chains}
    for c in res.chains:
        trained[c.variant] += int(c.state == "succeeded" and not c.eval_only)
    assert {e.name: e.n for e in res.report.full} == {v: n for v, n in trained.items() if n and v != "baseline"}
    pooled = {e.name: e for e in res.report.full}[reevals[0].variant]
    assert reevals[0].train_of in pooled.chain_ids


def test_when_the_users_last_chains_do_not_fit_the_loop_asks_again_and_runs_the_re_eval_that_does():
    """The user's x2 queue outlasts the budget: its last chains are skipped (a chain needs ~45 min),
    and in the same pick the gate is asked again, now free to add auto-repeat's re-eval (~25 min),
    instead of draining with half an hour unused (seed 98, found by running the benchmark)."""
    res = simulate_session("adaptive", 98)
    skipped = [c for c in res.chains if c.state == "skipped" and "needs ~45 min" in c.reason]
    (last,) = [c for c in res.chains if c.eval_only]
    assert last.state == "succeeded" and any(c.chain_id < last.chain_id for c in skipped)  # queued after their skips
    assert res.run_order[-1] == last.chain_id and res.idle_while_fits_s == 0.0
    assert (res.budget_s - res.last_end_s) / 60 < 10


def test_auto_repeat_prices_what_it_adds_as_admission_does_so_it_never_queues_a_chain_that_is_skipped():
    """With nothing queued, advise priced a repeat at the configured default (46 min) while admission
    used the learned high (47 min): auto-repeat queued three repeats that admission skipped and the
    session drained with 46 min left. Priced like the last training, the re-eval that fits runs
    (seed 2 of the second scenario, found by running the benchmark)."""
    res = simulate_session("adaptive, x1 queue", 2, effects=(0.0, 1.0, 3.0, -2.0))
    assert not [c for c in res.chains if c.auto and c.state == "skipped"]
    assert res.idle_while_fits_s == 0.0 and (res.budget_s - res.last_end_s) / 60 < 30
