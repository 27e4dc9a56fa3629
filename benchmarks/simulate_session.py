"""Replay 6-hour, 4-GPU sessions under a fake clock: FIFO by hand vs the planner's policies.

    python benchmarks/simulate_session.py --sessions 150 --also 0,1,3,-2   # the committed figures (a process per scenario)
    python benchmarks/simulate_session.py [--sessions 1000] [--seed 0] [--effects 0,0,1,2,3,-2]
                                          [--also E1,E2,... ...] [--policy NAME ...] [--out DIR]

The same as `opsdctl simulate`: every planner policy runs the worker's own loop and gate
(opsdctl.plan.loop.WorkerLoop, opsdctl.plan.planner.PlannerGate) with a fake clock and a fake
executor; see opsdctl/sim/ for the model and docs/planner.md for the figures. `--also` adds scenarios
(other mixes of true effects); `--policy` measures the named policies (repeat it; default: the
published rows). Prints the markdown tables and writes
benchmarks/results/simulate.json and simulate.md (or --out DIR).
"""

from __future__ import annotations

import argparse
import os
import sys
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the published rows (--policy picks others, e.g. "adaptive + futility"; `opsdctl simulate` runs all)
PUBLISHED = ("fifo-by-hand x1", "fifo-by-hand x2", "oracle x2", "planner fifo", "adaptive", "adaptive, x1 queue",
             "adaptive, auto-repeat first")


NOTES = """\
Every planner policy here runs the worker's own loop (opsdctl.plan.loop.WorkerLoop) and gate, so
these figures measure what `opsdctl worker` does, and every policy's submission is what
`export-recipe --leader` picks from its final report (opsdctl.plan.submission.pick_leader).

Two objectives, and with about 8 chains in 6 hours they pull apart. The adaptive policy ranks its
next chain by `opsdctl advise`'s value of information: the expected rise of the submission's
forecast official score, the number a researcher is paid on. A first run of an untried idea is
usually worth the most to that number, so the adaptive worker tries every queued idea once before
it repeats any (with five or six ideas and a baseline that is the whole session), and its
submission gains the most of the planner rows. Verdicts (`better`/`worse`, the claim with its error
guarantee) need local baseline runs and several runs of one idea, so a policy that spreads the
budget over every idea settles almost none: in correct verdicts the adaptive rows fall below the
FIFO queue that runs three ideas twice each. Correct verdicts and the bet cannot both be maximised
with 8 chains; by default opsdctl optimises the bet and keeps the verdicts honest. The opt-in
`--objective verdicts` with `--auto-repeat-first` (the `verdicts, auto-repeat first` row) spends
the session on verdicts instead: one idea beside the baseline until the chains left pay for
another, and its repeats before your untried ideas; it gives up part of the bet for them
(docs/planner.md, with 1,000-session figures).

The user's queue comes first: with --auto-repeat the worker queues its own chains only after the
chains the user queued (before them only with --auto-repeat-first), and while the user's chains
wait the policy allocates among them alone, and auto-repeat gets only the chains they leave.
`oracle x2` is no policy but the ceiling of the x2 queue for verdicts: the three ideas of largest
true effect, each twice, no chain spent finding them. Baseline share: the baseline's chains over all chains
started in a session."""


def _scenario(job: tuple) -> dict:
    sys.path.insert(0, str(REPO))
    from opsdctl.sim.results import run_benchmark

    sessions, seed, hours, effects, policies = job
    return run_benchmark(sessions=sessions, seed=seed, hours=hours, effects=effects, policies=policies)


def _effects(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    from opsdctl.sim.replay import POLICIES
    from opsdctl.sim.results import write_results
    from opsdctl.sim.world import DEFAULT_EFFECTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000, help="sessions per policy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--effects", default=",".join(f"{e:g}" for e in DEFAULT_EFFECTS),
                    help="true effects of the candidates, points")
    ap.add_argument("--also", action="append", default=[], metavar="E1,E2,...", help="another scenario")
    ap.add_argument("--policy", action="append", default=None, metavar="NAME",
                    help="measure this policy (repeatable; names as in opsdctl.sim.replay.POLICIES; "
                         "default: the published rows)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    unknown = [p for p in args.policy or () if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policy {unknown[0]!r}: one of {', '.join(POLICIES)}")
    policies = tuple(args.policy or PUBLISHED)
    jobs = [(args.sessions, args.seed, args.hours, _effects(e), policies) for e in [args.effects, *args.also]]
    with Pool(min(len(jobs), os.cpu_count() or 1)) as pool:  # one process per scenario
        docs = pool.map(_scenario, jobs)
    default = args.effects == ",".join(f"{e:g}" for e in DEFAULT_EFFECTS) and args.also == ["0,1,3,-2"]
    j, m = write_results(docs, args.out, notes=NOTES if default else "")
    print(m.read_text())
    print(f"{sum(d['seconds'] for d in docs):.0f}s; wrote {j} and {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
