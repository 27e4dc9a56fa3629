"""Replay 6-hour, 4-GPU sessions under a fake clock: FIFO by hand vs the planner's policies.

    python benchmarks/simulate_session.py --also 0,1,3,-2     # the committed figures (about 20 min)
    python benchmarks/simulate_session.py [--sessions 1000] [--seed 0] [--effects 0,0,1,2,3,-2]
                                          [--also E1,E2,... ...] [--out DIR]

The same as `opsdctl simulate`: every planner policy runs through the worker's own gate
(opsdctl.plan.planner.PlannerGate); see opsdctl/plan/simulate.py for the model. `--also` adds scenarios
(other mixes of true effects). Prints the markdown tables and writes
benchmarks/results/simulate.json and simulate.md (or --out DIR).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


NOTES = """\
Verdicts are compare's: the published mean carries a 1-point setup offset, the prior
must pass the local scatter's check, alpha is spent over the looks and the family is every idea
tried. That is why every policy settles far fewer comparisons than under the old one-look rule
(adaptive 0.86 correct verdicts per session then, with 0.020 wrong per session; 0.26 and 0.006 now):
with about 8 chains in 6 hours a verdict needs local baseline runs and several runs of the same
idea, so the user's queue starts with the baseline (as the quick start does). FIFO by hand with
every idea once never gets there; twice, it settles about one comparison in eight sessions.
How adaptive gets there (opsdctl/plan/policy.py, value of information): each next chain goes to the
allocation of the chains that still fit that maximizes the verdicts expected to settle by the end,
as compare will judge them (its look's level, the family it would make): a queued idea's effect is
taken as N(0, 2^2) points before its first run, each tried one's from its runs, and baseline runs
count for every comparison at once. Every idea tried raises m for all, so it tries about 2.5 ideas
and spends the rest on the baseline and on repeats of the leaders, queuing them with --auto-repeat;
`--try-every-variant` (every idea's first run first) leaves no chain to settle anything with.
Wrong verdicts: 0.006 per session and per no-effect idea tried (first mix), 0.001-0.002 (second).
Futility: a stop forfeits the run's score and drops the variant, and a drop is not a verdict; the
8-15 minutes it saves almost never buy one more chain here. The policy lets futility watch an
evaluation only when the time a stop saves could buy another chain before the deadline, and never
the repeat of a losing variant run to settle `worse`; adaptive + futility then matches adaptive."""


def _effects(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    from opsdctl.plan.simulate import DEFAULT_EFFECTS, run_benchmark, write_results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000, help="sessions per policy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--effects", default=",".join(f"{e:g}" for e in DEFAULT_EFFECTS),
                    help="true effects of the candidates, points")
    ap.add_argument("--also", action="append", default=[], metavar="E1,E2,...", help="another scenario")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    docs = [run_benchmark(sessions=args.sessions, seed=args.seed, hours=args.hours, effects=_effects(e))
            for e in [args.effects, *args.also]]
    default = args.effects == ",".join(f"{e:g}" for e in DEFAULT_EFFECTS) and args.also == ["0,1,3,-2"]
    j, m = write_results(docs, args.out, notes=NOTES if default else "")
    print(m.read_text())
    print(f"{sum(d['seconds'] for d in docs):.0f}s; wrote {j} and {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
