"""How much regret can any submission rule save? The Bayes rule under the true mix, against the local mean.

    python benchmarks/regret_bound.py      # ~1 min

A stripped-down session with everything in the rule's favour: six ideas from the benchmark's mix
(half null, a third U(-5, -1), the rest U(+1, +4)), one run each and a second run for the two that
led after the first (as a policy that repeats leaders would), the baseline's level known exactly,
run-to-run sd 1.48 or 2.5. Two rules pick the submission (or the baseline, effect 0):

  Bayes      the highest posterior mean effect under the TRUE mix (exact, on a fine grid): no rule
             that sees the same runs has a lower expected regret
  local mean the highest local mean effect, if above 0

Regret: the best true effect tried (baseline 0 included) minus the submission's. If the Bayes
rule under the true prior cuts regret by only a few percent, a better forecast cannot cut it by
30%: what is left is set by how many runs each idea gets, not by how the submission is picked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decision import MIX_SLAB, NULL  # noqa: E402  (the mix as decision.py's oracle integrates it)


def posterior_mean(ybar: np.ndarray, se: np.ndarray) -> np.ndarray:
    """E[theta | ybar] under the mix (NULL at 0, the rest on MIX_SLAB), ybar ~ N(theta, se^2)."""
    grid, mass = MIX_SLAB
    null = NULL * norm.pdf(ybar, 0.0, se)
    like = norm.pdf(ybar[:, None], grid[None, :], se[:, None]) * mass[None, :]
    return (like @ grid) / (null + like.sum(axis=1))


def main(sessions: int = 30_000, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    for sigma in (1.48, 2.5):
        regret = {"Bayes": [], "local mean": []}
        for _ in range(sessions):
            kind = rng.choice(3, size=6, p=[1 / 2, 1 / 3, 1 / 6])
            th = np.where(kind == 0, 0.0, np.where(kind == 1, rng.uniform(-5, -1, 6), rng.uniform(1, 4, 6)))
            first = th + sigma * rng.standard_normal(6)
            n = np.ones(6)
            n[np.argsort(-first)[:2]] += 1
            ybar = (first + np.where(n > 1, th + sigma * rng.standard_normal(6), 0.0)) / n
            best = max(0.0, th.max())
            pm = posterior_mean(ybar, sigma / np.sqrt(n))
            regret["Bayes"].append(best - (th[np.argmax(pm)] if pm.max() > 0 else 0.0))
            regret["local mean"].append(best - (th[np.argmax(ybar)] if ybar.max() > 0 else 0.0))
        b, m = np.mean(regret["Bayes"]), np.mean(regret["local mean"])
        se = np.std(np.array(regret["Bayes"]) - np.array(regret["local mean"]), ddof=1) / np.sqrt(sessions)
        print(f"sd {sigma}: regret Bayes {b:.3f}, local mean {m:.3f}: {100 * (1 - b / m):.1f}% lower "
              f"(difference SE {se:.3f}, {sessions} sessions)")


if __name__ == "__main__":
    main()
