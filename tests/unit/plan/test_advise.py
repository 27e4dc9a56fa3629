"""`opsdctl advise`: the belief's gains against a direct simulation of the observation, the
ranking's rules (the command over a real store: tests/integration/test_advise.py)."""

from __future__ import annotations

import numpy as np
import pytest

from opsdctl.plan import advise
from opsdctl.stats import belief as bl
from opsdctl.stats import forecast as fc


def _belief(runs=((54.0, 53.7, 54.4), (55.5, 55.4), (53.0, 53.1), (55.0,)), v_eval=0.8):
    names = ["baseline", "a", "b", "c"][: len(runs)]
    arms = [fc.ArmRuns(n, tuple(r)) for n, r in zip(names, runs)]
    post = fc.posterior(arms[0], arms[1:], fc.NoiseParts(1.48**2 - v_eval, v_eval), fc.PublishedRef(54.22, 1.48, 5))
    return bl.from_posterior(post)


def _simulated_gain(b: bl.Belief, arm: int, noise: float, draws: int, rng) -> tuple[float, float]:
    """Draw the observation from today's predictive, redo the posterior with it, take the best mean."""
    h = fc.obs_row(arm, len(b.arms))
    mu, cov = b.mean, b.cov
    y = h @ mu + rng.standard_normal(draws) * np.sqrt(h @ cov @ h + noise)
    k = cov @ h / (h @ cov @ h + noise)
    post = mu[None, :] + (y - h @ mu)[:, None] * k[None, :]
    best = (post @ fc.official_map(len(b.arms)).T).max(axis=1)
    return float(best.mean() - b.official_mean().max()), float(best.std() / np.sqrt(draws))


@pytest.mark.parametrize("arm", [0, 1, 2, 3])
def test_gain_of_a_run_matches_a_direct_simulation(arm):
    b = _belief()
    rng = np.random.default_rng(arm)
    got, se = _simulated_gain(b, arm, b.s2, 400_000, rng)
    assert b.gain_run(arm) == pytest.approx(got, abs=4 * se + 1e-9)


def test_reeval_is_worth_less_than_a_repeat_and_new_idea_is_worth_something():
    b = _belief()
    for i in range(len(b.arms)):
        assert 0.0 <= b.gain_run(i, b.reeval_noise()) < b.gain_run(i)
    assert b.gain_new() > 0.0
    assert b.gain_new(b.screen_noise(60 / 240)) < b.gain_new()


def test_gain_new_matches_a_direct_simulation():
    b = _belief()
    rng = np.random.default_rng(7)
    d = rng.normal(b.family_mean, b.family_sd, 400_000)
    # the fresh idea's run: its posterior effect mean given the belief over B + o
    h = fc.obs_row(0, len(b.arms))
    bo_mean, bo_var = h @ b.mean, h @ b.cov @ h
    y = bo_mean + d + rng.standard_normal(d.size) * np.sqrt(bo_var + b.s2)
    # joint update of (B, o, D_1.., D_new) with the one observation
    k = len(b.arms)
    mean = np.append(b.mean, b.family_mean)
    cov = np.zeros((k + 2, k + 2))
    cov[:k + 1, :k + 1] = b.cov
    cov[-1, -1] = b.family_sd**2
    hh = np.append(h, 1.0)
    gain = cov @ hh / (hh @ cov @ hh + b.s2)
    post = mean[None, :] + (y - hh @ mean)[:, None] * gain[None, :]
    off = post[:, [0]] + np.concatenate([np.zeros((d.size, 1)), post[:, 2:]], axis=1)
    best = off.max(axis=1)
    sim = best.mean() - b.official_mean().max()
    assert b.gain_new() == pytest.approx(sim, abs=4 * best.std() / np.sqrt(d.size))


def test_ranking_puts_stop_after_what_is_worth_it_and_before_what_does_not_fit():
    b = _belief()
    costs = advise.Costs(chain_s=3600.0, eval_s=600.0, screen_s=2400.0)
    ranked = advise.rank(b, costs, usable_s=2 * 3600.0, new_ideas=["d"], full_samples=240)
    acts = [a.action for a in ranked]
    assert acts.count(advise.Action.STOP) == 1
    stop = acts.index(advise.Action.STOP)
    head, tail = ranked[:stop], ranked[stop + 1:]
    assert head and all(a.fits and a.gain >= advise.MIN_GAIN for a in head)
    assert [a.rate for a in head] == sorted((a.rate for a in head), reverse=True)
    assert all(not a.fits or a.gain < advise.MIN_GAIN for a in tail)
    new = next(a for a in ranked if a.action == advise.Action.NEW)
    assert new.variant == "d" and new.minutes == 60.0
    # no time left: nothing fits, stop comes first
    late = advise.rank(b, costs, usable_s=300.0)
    assert late[0].action == advise.Action.STOP and not any(a.fits for a in late[1:])


def test_what_is_worth_nothing_keeps_its_order_whatever_the_last_bit_says(monkeypatch):
    """Gains under MIN_GAIN are often rounding noise (1e-16 of a difference of two means), which a
    numpy release or another special-function route moves: they must not order the actions."""
    b = _belief()
    noise = {i: 1e-16 * (i + 1) for i in range(len(b.arms))}  # later arms a last bit "better"
    monkeypatch.setattr(bl.Belief, "gain_run", lambda self, i, n=None: noise[i])
    monkeypatch.setattr(bl.Belief, "gain_confirm", lambda self, i, n=None: 0.0)
    costs = advise.Costs(chain_s=3600.0, eval_s=600.0, screen_s=2400.0)
    ranked = advise.rank(b, costs, usable_s=20 * 3600.0)
    stop = [a.action for a in ranked].index(advise.Action.STOP)
    runs = [a for a in ranked[stop + 1:] if a.action in (advise.Action.BASELINE, advise.Action.REPEAT)]
    assert len(runs) >= 2 and all(a.fits and a.gain < advise.MIN_GAIN for a in runs)
    assert [a.variant for a in runs] == [n for n in b.arms if n in {a.variant for a in runs}]


def test_a_clear_leader_leaves_little_to_learn():
    far = _belief(runs=((54.0,) * 6, (60.0,) * 6, (50.0,) * 6))
    close = _belief(runs=((54.0,) * 6, (55.0,) * 6, (54.8,) * 6))
    assert far.gain_run(2) < 1e-3 < close.gain_run(2)


def test_the_adaptive_policy_takes_the_first_action_the_worker_can_take():
    from opsdctl.plan import policy

    A, S = advise.Advice, advise.Action
    queued = [policy.QueuedItem(1, "a"), policy.QueuedItem(2, "d")]
    ranked = [A(S.REEVAL, "a", 10, True, 0.3), A(S.NEW, "d", 60, True, 0.2), A(S.REPEAT, "a", 60, True, 0.1),
              A(S.STOP, None, 0, True, 0.0)]
    p = policy.plan(queued, None, policy.PlanInputs(advice=ranked, auto_repeat=True, known_variants=["a"]))
    assert p.order == [2, 1] and p.slots[0].why.startswith("advise: first run of d") and p.extra is None
    # the leader's repeat, not queued: --auto-repeat queues it first, and futility leaves it alone
    p = policy.plan([], None, policy.PlanInputs(advice=ranked[2:], auto_repeat=True, known_variants=["a"]))
    assert (p.extra, p.extra_first, p.full_eval) == ("a", True, ["a"])
    # without --auto-repeat the worker adds nothing; stop ranked first: nothing of its own either
    assert policy.plan([], None, policy.PlanInputs(advice=ranked[2:], known_variants=["a"])).extra is None
    p = policy.plan(queued, None, policy.PlanInputs(advice=[A(S.STOP, None, 0, True, 0.0), *ranked], auto_repeat=True,
                    known_variants=["a"]))
    assert p.extra is None and p.order == [1, 2] and p.extra_why.startswith("advise: stop")


def test_a_run_action_counts_the_runs_it_opens():
    # a settled-looking race: one more run of b cannot change the submission, six together can
    b = _belief(runs=((54.0,) * 6, (56.0,) * 6, (55.0,) * 6), v_eval=0.3)
    one, six = b.gain_run(2), b.gain_run(2, b.s2 / 6) / 6
    assert six > 3 * one
    ranked = advise.rank(b, advise.Costs(3600.0, 600.0, 2400.0), usable_s=6 * 3600.0)
    rep = next(a for a in ranked if a.action == advise.Action.REPEAT and a.variant == "b")
    # each r runs' worth: the knowledge gradient or the thresholded rule's (a confirmatory run), the larger
    assert rep.gain == pytest.approx(max(max(b.gain_run(2, b.s2 / r), b.gain_confirm(2, b.s2 / r)) / r
                                         for r in range(1, 7)))
    # only the runs that fit count: with room for one chain, the one run's gain
    short = advise.rank(b, advise.Costs(3600.0, 600.0, 2400.0), usable_s=3700.0)
    assert next(a for a in short if a.action == advise.Action.REPEAT and a.variant == "b").gain == pytest.approx(
        max(one, b.gain_confirm(2)))
