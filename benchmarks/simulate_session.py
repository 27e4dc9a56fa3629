"""Replay 6-hour, 4-GPU sessions under a fake clock: FIFO by hand vs the planner's policies.

    python benchmarks/simulate_session.py --sessions 300 --also 0,1,3,-2 --jobs 2   # the committed figures
    python benchmarks/simulate_session.py [--sessions 1000] [--seed 0] [--effects 0,0,1,2,3,-2]
                                          [--also E1,E2,... ...] [--policy NAME ...] [--jobs N] [--out DIR]

The same as `opsdctl simulate`: every planner policy runs the worker's own loop and gate
(opsdctl.plan.loop.WorkerLoop, opsdctl.plan.planner.PlannerGate) with a fake clock and a fake
executor; see opsdctl/plan/simulate.py for the model and docs/planner.md for the figures. `--also` adds scenarios
(other mixes of true effects), `--jobs` runs the scenarios in that many processes, `--policy`
measures the named policies (repeat it; default: the published rows). Prints the markdown tables and writes
benchmarks/results/simulate.json and simulate.md (or --out DIR).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the published rows (--policy picks others, e.g. "adaptive + futility"; `opsdctl simulate` runs all)
PUBLISHED = ("fifo-by-hand x1", "fifo-by-hand x2", "oracle x2", "planner fifo", "adaptive", "adaptive, x1 queue",
             "adaptive, auto-repeat first")


NOTES = """\
Every planner policy here runs the worker's own loop (opsdctl.plan.loop.WorkerLoop) and gate, so
these figures measure what `opsdctl worker` does. Verdicts are compare's: the published mean
carries a 1-point setup offset, the prior must pass the local scatter's check, alpha is spent over
the looks and the family is every idea tried; with about 8 chains in 6 hours a verdict needs local
baseline runs and several runs of one idea, so few comparisons settle under any policy.
The adaptive policy's pick is `opsdctl advise`'s ranking: each action's expected gain of the
submission's official score (the knowledge gradient on the forecast). In a traced session (seed 5) a
queued idea's first run was worth 0.2-0.7 expected points and a repeat of a tried idea 0.06, so the
worker spends the user's chains on first runs of every idea (6 of 6 tried, 4 of 4 in the second
scenario, one or two baseline runs) and no comparison settled in any session: that policy serves
the bet (the submission's true gain column: +0.44 and +0.53 points over the best FIFO's), not the
verdict count. The user's queue comes first, so with the x2 queue (14 chains, about 8 fit) and the
x1 queue (7 or 5 chains) the policy only orders the user's chains, and auto-repeat gets what is
left (1.0 and 2.9 chains with the x1 queue). `oracle x2` is the ceiling of the x2 queue for
verdicts: the three ideas of largest true effect, each twice, no chain spent finding them
(2.16x and 1.26x the best FIFO): the 1.5x goal is out of reach in the second scenario even then.
Baseline share: the baseline's chains over all chains started in a session."""


def _effects(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _scenario(kwargs: dict) -> dict:
    sys.path.insert(0, str(REPO))  # a spawned worker process does not run main()
    from opsdctl.plan.simulate import run_benchmark

    return run_benchmark(**kwargs)


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    from opsdctl.plan.simulate import DEFAULT_EFFECTS, POLICIES, write_results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000, help="sessions per policy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--effects", default=",".join(f"{e:g}" for e in DEFAULT_EFFECTS),
                    help="true effects of the candidates, points")
    ap.add_argument("--also", action="append", default=[], metavar="E1,E2,...", help="another scenario")
    ap.add_argument("--policy", action="append", default=None, metavar="NAME",
                    help="measure this policy (repeatable; names as in opsdctl.plan.simulate.POLICIES; "
                         "default: the published rows)")
    ap.add_argument("--jobs", type=int, default=1, help="scenarios run in this many processes")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    unknown = [p for p in args.policy or () if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r}: one of {', '.join(POLICIES)}")
    jobs = [dict(sessions=args.sessions, seed=args.seed, hours=args.hours, effects=_effects(e),
                 policies=args.policy or PUBLISHED)
            for e in [args.effects, *args.also]]
    if args.jobs > 1 and len(jobs) > 1:
        from multiprocessing import Pool

        with Pool(min(args.jobs, len(jobs))) as pool:
            docs = pool.map(_scenario, jobs)
    else:
        docs = [_scenario(j) for j in jobs]
    default = args.effects == ",".join(f"{e:g}" for e in DEFAULT_EFFECTS) and args.also == ["0,1,3,-2"]
    j, m = write_results(docs, args.out, notes=NOTES if default else "")
    print(m.read_text())
    print(f"{sum(d['seconds'] for d in docs):.0f}s; wrote {j} and {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
