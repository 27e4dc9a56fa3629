"""`opsdctl demo`: the whole main job on a laptop, in a fresh workspace.

It writes a starter config for the `tiny` profile (a tiny Qwen3-architecture model, its
tokenizer and generated arithmetic problems, all built offline), queues the baseline and two
variants with repeats, runs the real trainer and evaluator through the worker, and ends with
status, the compare table and its PNG, and the winner's recipe.env.

The workloads run as subprocesses (as in any real set-up), so this module stays torch-free.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape


def command(
    ctx: typer.Context,
    directory: Path = typer.Option(Path("opsdctl-demo"), "--dir", "-d", metavar="DIR",
                                   help="A fresh workspace for the demo (refused if it already holds one)."),
) -> None:
    """The whole job on this machine, no GPU, no downloads: a tiny model, three recipes, compare, export.

    Sets up (once) a tiny Qwen3-architecture model warm-started on generated arithmetic (shipped),
    queues the baseline x3, token-clip x2 and cosine x2, runs the real trainer and evaluator
    through the worker, then prints status, the compare table (and PNG) and the winner's recipe.env.
    """
    from opsdctl.cli.commands.status import render_status
    from opsdctl.cli.documents.status import gather_status
    from opsdctl.config import load_config
    from opsdctl.fsutil import atomic_write_text
    from opsdctl.cli.documents.compare import compare_document
    from opsdctl.recipes.export import export_recipe
    from opsdctl.cli.compare_table import render_compare
    from opsdctl.stats.plots import plot_compare

    con = console()
    t0 = time.time()
    paths = prepare_workspace(directory)
    con.print(f"workspace: [bold]{escape(str(paths.root))}[/bold]")
    build_tiny_assets(con, paths.worker_log)
    cfg = load_config(paths.config)
    store = App.of(ctx).store(cfg)
    total = queue_demo(cfg, store, con)
    run_worker(paths, cfg, store, total, con)

    con.print("[bold]4/4[/bold] results\n")
    reader = App.of(ctx).reader(cfg)
    render_status(con, gather_status(cfg, reader, None))
    doc = compare_document(cfg, reader)
    report = doc.report
    con.print()
    render_compare(report, con, submit=doc.submit)
    plot_compare(report, paths.plot, title="opsdctl demo (tiny profile): avg@4 on 30 generated problems")
    best = best_variant(report)
    if best:
        exp = export_recipe(store, best)
        atomic_write_text(paths.recipe_env, exp.recipe_env)
        atomic_write_text(paths.method_defaults, exp.method_defaults)
        con.print(f"\n[bold]best variant: {escape(best)}[/bold] -> {escape(str(paths.recipe_env))}")
        con.print(escape(exp.recipe_env.rstrip()))
        if exp.off_default_method:  # method knobs cannot travel in recipe.env: they ride as code defaults
            knob_list = ", ".join(f"{k} = {v!r}" for k, v in exp.off_default_method.items())
            con.print(f"[yellow]method knobs ({escape(knob_list)}) cannot travel in recipe.env: written as "
                      f"the trainer's defaults to {escape(str(paths.method_defaults))}[/yellow]")
    con.print(f"\n[bold]where everything is[/bold] (took {(time.time() - t0) / 60:.1f} min)")
    for label, path in (("config", paths.config), ("store", paths.db), ("logs and outputs", paths.runs),
                        ("worker log", paths.worker_log), ("compare plot", paths.plot),
                        ("recipe.env", paths.recipe_env), ("method defaults", paths.method_defaults)):
        con.print(f"  {label:17s} {escape(str(path))}")
    con.print(f"  next: cd {escape(str(paths.root))} && opsdctl status / opsdctl compare / opsdctl show token-clip")


DEMO_RECIPES = (("baseline", 3), ("token-clip", 2), ("cosine", 2))  # (recipe, repeats)


@dataclass
class DemoPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "opsdctl.toml"

    @property
    def db(self) -> Path:
        return self.root / "runs.db"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def worker_log(self) -> Path:
        return self.root / "worker.log"

    @property
    def plot(self) -> Path:
        return self.root / "compare.png"

    @property
    def recipe_env(self) -> Path:
        return self.root / "recipe.env"

    @property
    def method_defaults(self) -> Path:
        return self.root / "method_defaults.toml"


def prepare_workspace(root: Path) -> DemoPaths:
    """A fresh workspace: refuse one that already holds a store (never clobber runs)."""
    from opsdctl.errors import UserError
    from opsdctl.cli.commands.init import init_workspace

    paths = DemoPaths(root.resolve())
    if paths.db.exists() or paths.config.exists():
        raise UserError(
            f"{paths.root}: already holds an opsdctl workspace (opsdctl.toml or runs.db); "
            "remove it or pass --dir NEW_DIR for a fresh demo"
        )
    init_workspace(paths.root, "tiny")
    text = paths.config.read_text()
    # The demo's code is the installed opsdctl (trainer/, eval/), not this directory: no snapshot.
    text = text.replace("snapshot_code = true ", "snapshot_code = false")
    text = text.replace("# hours = 6                                  # counted from the first worker start",
                        "hours = 1                                    # counted from the first worker start")
    paths.config.write_text(text)
    return paths


def build_tiny_assets(con, log_path: Path) -> None:
    """Build (once, cached) the tiny model, tokenizer and data in a subprocess."""
    from opsdctl.errors import UserError

    con.print("[bold]1/4[/bold] tiny model, tokenizer and arithmetic data (built once, then cached)...")
    t0 = time.time()
    with open(log_path, "a") as log:
        proc = subprocess.run([sys.executable, "-m", "opsdkit.tiny"], stdout=subprocess.PIPE,
                              stderr=log, text=True)
    if proc.returncode != 0:
        raise UserError(f"building the tiny assets failed (exit {proc.returncode}); see {log_path}")
    con.print(f"    {proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else 'ready'} "
              f"[dim]({time.time() - t0:.0f} s)[/dim]")


def queue_demo(cfg, store, con) -> int:
    from opsdctl.client.enqueue import queue_recipes

    total = 0
    for name, repeats in DEMO_RECIPES:
        result = queue_recipes(cfg, lambda: store, [name], repeats=repeats, seed=0, same_seed=False,
                               priority=0, force=False)
        total += len(result.chains)
    con.print(f"[bold]2/4[/bold] queued {total} chains: "
              + ", ".join(f"{name} x{n}" for name, n in DEMO_RECIPES))
    return total


def run_worker(paths: DemoPaths, cfg, store, total: int, con) -> None:
    """Run `opsdctl worker --drain` and show its progress until the queue is drained."""
    from opsdctl.errors import UserError

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from opsdctl.cli.documents.status import gather_status
    from opsdctl.store.open_read import open_reader

    reader = open_reader(store)

    con.print(f"[bold]3/4[/bold] worker: train -> eval for each chain (log: {paths.worker_log})")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(paths.worker_log, "a") as log:
        proc = subprocess.Popen([sys.executable, "-m", "opsdctl.cli", "--config", str(paths.config),
                                 "worker", "--drain"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=paths.root)
        try:
            with Progress(TextColumn("    chains"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          TextColumn("{task.description}"), console=con, transient=False) as bar:
                task = bar.add_task("", total=total)
                while proc.poll() is None:
                    doc = gather_status(cfg, reader, None)
                    done = sum(c["state"] not in ("queued", "running") for c in doc["chains"])
                    running = [c for c in doc["chains"] if c["state"] == "running"]
                    what = ""
                    if running:
                        c = running[0]
                        prog = (c.get("progress") or {}).get("text", "")
                        what = f"chain {c['chain_id']} {c['variant']} seed {c['seed']}: {c.get('stage') or ''} {prog}"
                    bar.update(task, completed=done, description=what)
                    time.sleep(1.0)
                bar.update(task, completed=total, description="")
        except KeyboardInterrupt:
            proc.send_signal(2)
            proc.wait()
            raise
    if proc.returncode != 0:
        raise UserError(f"the worker exited with {proc.returncode}; see {paths.worker_log}")


def best_variant(report) -> str | None:
    """What the submission rule picks (opsdctl.plan.submission.pick_leader, as export-recipe --leader):
    the candidate most likely above the baseline, or the baseline when none is clearly above it."""
    from opsdctl.plan.submission import pick_leader

    lead = pick_leader(report)
    return lead.variant or report.baseline.name
