"""Admission through whole simulated sessions: over random budgets and durations, the worker loop
the simulator drives never starts a chain that cannot finish before the deadline. Pure and in
process, but seconds of CPU: here, not in the unit loop (tests/unit/plan/test_admission.py holds
the admission rules themselves)."""

from __future__ import annotations

import numpy as np
import pytest

from opsdctl.sim.replay import simulate_session

MIN = 60.0


@pytest.mark.parametrize("seed", range(3))
def test_no_chain_ever_starts_that_cannot_finish(seed):
    """Random budgets and durations through the simulator's worker loop over the gate: every chain
    the planner starts ends before the deadline; FIFO by hand has cut chains."""
    rng = np.random.default_rng(seed)
    for i in range(3):  # nine random budgets over the three seeds
        hours = float(rng.uniform(0.5, 6.0))
        for pol in ("planner fifo", "adaptive", "adaptive + futility"):
            r = simulate_session(pol, seed=1000 * seed + i, hours=hours)
            assert r.cut == 0
            assert r.last_end_s <= r.budget_s - 5 * MIN + 1e-6 or r.started == 0
        assert simulate_session("fifo-by-hand x1", seed=1000 * seed + i, hours=hours).cut <= 1
