"""`opsdctl simulate`: replay sessions under a fake clock through the worker's own loop and gate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from opsdctl.cli import args
from opsdctl.cli.console import print_json


def command(
    ctx: typer.Context,
    sessions: int = typer.Option(200, "--sessions", "-n", min=1, help="Simulated sessions per policy.",
                                 callback=args.count("--sessions", 1)),
    seed: int = typer.Option(0, "--seed", help="Base seed (session i uses seed + i).", callback=args.seed),
    hours: float = typer.Option(6.0, "--hours", help="Budget of one session."),
    effects: Optional[str] = typer.Option(None, "--effects", metavar="E1,E2,...",
                                          help="True effects of the candidates, points [default: 0,0,+1,+2,+3,-2]."),
    gpus_per_chain: Optional[int] = typer.Option(None, "--gpus-per-chain", metavar="N",
                                                  help="Run the planner policies on the 4 GPUs in slots of N (1, 2 or 4): "
                                                       "4 / N chains at once [default: one chain at a time on all four]."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="Also write simulate.json and simulate.md here."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Replay 6-hour, 4-GPU sessions under a fake clock: FIFO by hand vs the planner's policies.

    Runs the worker's own loop and gate (opsdctl.plan.loop.WorkerLoop, opsdctl.plan.planner.PlannerGate:
    order, auto-repeat, admission, futility) with a fake clock and a fake executor over simulated
    stage durations and scores; needs no config or store. --gpus-per-chain N replays the planner
    policies with 4 / N chains at once, each on its own N GPUs.
    """
    from opsdctl.errors import UserError
    from opsdctl.sim.results import run_benchmark, write_results
    from opsdctl.sim.world import DEFAULT_EFFECTS

    eff = DEFAULT_EFFECTS if effects is None else tuple(float(x) for x in effects.split(",") if x.strip())
    if gpus_per_chain is not None and gpus_per_chain not in (1, 2, 4):
        raise UserError(f"--gpus-per-chain {gpus_per_chain}: the simulated session has 4 GPUs; slots of 1, 2 or 4")
    doc = run_benchmark(sessions=sessions, seed=seed, hours=hours, effects=eff, gpus_per_chain=gpus_per_chain)
    if out is not None:
        write_results(doc, out)
    if as_json:
        print_json(doc)
        return
    sys.stdout.write(doc["markdown"] + "\n")
