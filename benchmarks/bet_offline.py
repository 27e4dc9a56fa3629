"""The submission rule re-scored offline: variants of opsdctl.stats.bet on sessions' rows, in seconds.

    python benchmarks/worlds.py --split tune --sessions 200 --adaptive 16 --rows /tmp/rows_tune.json
    python benchmarks/bet_offline.py --rows /tmp/rows_tune.json          # the worlds' own sessions
    python benchmarks/bet_offline.py --simulate 2000                    # fixed layouts, drawn here

A row (benchmarks/worlds.py --rows) holds each arm's local mean and run count, the forecast's s^2
and dof, the true effects: enough to replay the rule (the baseline level as
opsdctl.plan.submission.leading builds it) at other constants and score it with worlds.py's goals.
--simulate draws fixed-layout sessions straight from the worlds' definitions (the noise estimate
as compare's forecast makes it; the offset sd widened on s^2, where compare widens on the verdicts'
pooled s) on its own seed (default 11: neither the tune nor the held-out split), so constants can
be chosen on thousands of sessions without touching the held-out seeds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from worlds import LAYOUTS, PUBLISHED, PUBLISHED_SD, WORLDS, normal_family_pick, score  # noqa: E402

from opsdctl.stats import bet  # noqa: E402

def simulate(n_sessions: int, seed: int) -> dict[str, list[dict]]:
    """Fixed-layout sessions of every world, as rows of worlds.py's shape (the fields this file reads)."""
    out: dict[str, list[dict]] = {}
    for wi, world in enumerate(WORLDS):
        for layout, spec in LAYOUTS.items():
            if spec is None:
                continue
            n_base, n_ideas, reps = spec
            rows = []
            for i in range(n_sessions):
                rng = np.random.default_rng([seed, wi, list(LAYOUTS).index(layout), i])
                eff = world.effects(rng, n_ideas)
                true_base = PUBLISHED + rng.normal(0.0, world.sd / math.sqrt(5))
                arms, ss, dof = [], 0.0, 0
                for name, n, e in [("baseline", n_base, 0.0)] + [(f"idea{j}", reps, eff[j]) for j in range(n_ideas)]:
                    y = true_base + world.offset + e + rng.normal(0.0, world.sd, n)
                    if n > 1:
                        ss, dof = ss + float(((y - y.mean()) ** 2).sum()), dof + n - 1
                    arms.append({"name": name, "effect": e, "local": float(y.mean()) if n else None, "n": n})
                s2, nu = bet.noise_estimate(ss, dof, PUBLISHED_SD)
                local_mean = {a["name"]: a["local"] for a in arms}
                best = max(arms[1:], key=lambda a: a["local"])
                lm = best["name"] if n_base == 0 or best["local"] > local_mean["baseline"] else "baseline"
                lm_gain = best["effect"] if lm != "baseline" else 0.0
                rows.append({"arms": arms, "s2": s2, "nu": nu, "gain": {"local mean": lm_gain}})
            out[f"{world.name} | {layout}"] = rows
    return out


def _line(label: str, s: dict, detail: bool) -> None:
    print(f"| {label} | {len(s['fail_gain'])} | {len(s['fail_worse'])} | {s['margin']:+.3f} | {s['worst']:.3f} "
          f"| {s['mean']:+.3f} |", flush=True)
    if detail:
        print("   gain:", "; ".join(s["fail_gain"]), " worse:", "; ".join(s["fail_worse"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=Path, default=None, help="worlds.py --rows output")
    ap.add_argument("--simulate", type=int, default=0, help="sessions per world and fixed layout drawn here")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--detail", action="store_true", help="the failing cells by name")
    ap.add_argument("--mu-sd", type=float, nargs="+", default=[bet.MU_SD])
    ap.add_argument("--tau-min", type=float, nargs="+", default=[bet.TAU_MIN])
    ap.add_argument("--tau-scale", type=float, nargs="+", default=[bet.TAU_SCALE])
    ap.add_argument("--threshold", type=float, nargs="+", default=[bet.P_SUBMIT])
    args = ap.parse_args(argv)
    results = json.loads(args.rows.read_text()) if args.rows else simulate(args.simulate, args.seed)
    print("| rule: mu_sd, tau_min, tau_scale, threshold | cells failing gain | failing P(worse>1) "
          "| worst gain margin (paired, 2 SE) | worst P(worse) | mean gain |")
    print("|---|---|---|---|---|---|")
    if args.rows and all("bet" in x["gain"] for rows in results.values() for x in rows):
        _line("the rows' own picks (the rule that made them)", score(results, lambda x: x["gain"]["bet"]), args.detail)
    for mu, tau, scale in itertools.product(args.mu_sd, args.tau_min, args.tau_scale):
        for t in args.threshold:
            s = score(results, lambda x: normal_family_pick(x, t, mu, tau, scale))
            _line(f"{mu:g}, {tau:g}, {scale:g}, {t:.2f}", s, args.detail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
