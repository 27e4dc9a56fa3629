"""Replay 6-hour, 4-GPU sessions under a fake clock: FIFO by hand vs the planner's policies.

    python benchmarks/simulate_session.py --sessions 300 --also 0,1,3,-2 --jobs 2   # the committed figures
    python benchmarks/simulate_session.py [--sessions 1000] [--seed 0] [--effects 0,0,1,2,3,-2]
                                          [--also E1,E2,... ...] [--policy NAME ...] [--jobs N] [--out DIR]

The same as `opsdctl simulate`: every planner policy runs the worker's own loop and gate
(opsdctl.plan.loop.WorkerLoop, opsdctl.plan.planner.PlannerGate) with a fake clock and a fake
executor; see opsdctl/plan/simulate.py for the model and docs/planner.md for the figures. `--also` adds scenarios
(other mixes of true effects), `--jobs` runs the scenarios in that many processes, `--policy`
measures only the named policies (repeat it). Prints the markdown tables and writes
benchmarks/results/simulate.json and simulate.md (or --out DIR).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


NOTES = """\
Every planner policy here runs the worker's own loop (opsdctl.plan.loop.WorkerLoop) and gate, so
these figures measure what `opsdctl worker` does. Verdicts are compare's: the published mean
carries a 1-point setup offset, the prior must pass the local scatter's check, alpha is spent over
the looks and the family is every idea tried; with about 8 chains in 6 hours a verdict needs local
baseline runs and several runs of one idea, so few comparisons settle under any policy.
The user's queue comes first: with --auto-repeat the worker queues its own chains only after the
chains the user queued (before them only with --auto-repeat-first), and while the user's chains
wait the policy allocates among them alone. With the x2 queue (every idea twice, 14 chains of which
about 8 fit) the adaptive policy therefore chooses which of the user's chains run and in what
order, and auto-repeat rarely gets a turn; `adaptive, auto-repeat first` is the earlier behaviour
(value-of-information picks queued ahead of the user's chains), kept as an opt-in and measured here.
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
                    help="measure only this policy (repeatable; names as in the table)")
    ap.add_argument("--jobs", type=int, default=1, help="scenarios run in this many processes")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    unknown = [p for p in args.policy or () if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r}: one of {', '.join(POLICIES)}")
    jobs = [dict(sessions=args.sessions, seed=args.seed, hours=args.hours, effects=_effects(e), policies=args.policy)
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
