"""Replay 6-hour, 4-GPU sessions under a fake clock: FIFO by hand vs the planner's policies.

    python benchmarks/simulate_session.py [--sessions 1000] [--seed 0] [--effects 0,0,1,2,3,-2]
                                          [--also 0,1,3,-2 ...] [--out DIR]

The same as `opsdctl simulate`: every planner policy runs through the worker's own gate
(opsdctl.planner.PlannerGate); see opsdctl/simulate.py for the model. `--also` adds scenarios
(other mixes of true effects). Prints the markdown tables and writes
benchmarks/results/simulate.json and simulate.md (or --out DIR).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _effects(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    from opsdctl.simulate import DEFAULT_EFFECTS, run_benchmark, write_results

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
    j, m = write_results(docs, args.out)
    print(m.read_text())
    print(f"{sum(d['seconds'] for d in docs):.0f}s; wrote {j} and {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
