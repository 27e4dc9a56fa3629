"""The `opsdctl` command line. Each command parses, calls one core function, and renders.

Modules are imported inside the commands so `opsdctl --help` and `opsdctl status` start fast;
nothing here (or anything it imports) touches torch, transformers or vllm.
Every listing command has `--json`. A UserError is one red line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from opsdctl.cli import args

app = typer.Typer(
    name="opsdctl",
    help=(
        "Find a better On-Policy Self-Distillation recipe inside a hard GPU budget.\n\n"
        "Queue recipe variants, let one worker run each chain (train -> eval) on your GPUs, "
        "watch status, and export the winner as the official recipe.env."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # plain tracebacks for real bugs; user errors are one line
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode="markdown",
)

_state: dict = {"config": None}


@app.callback()
def _root(
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", envvar="OPSDCTL_CONFIG", metavar="PATH",
        help="Config file [default: ./opsdctl.toml].", show_default=False,
    ),
) -> None:
    _state["config"] = config


def _config():
    from opsdctl.config import find_config, load_config

    cfg = load_config(find_config(str(_state["config"]) if _state["config"] else None))
    for warning in cfg.warnings:
        _warn(warning)
    return cfg


def _store(cfg):
    from opsdctl.store.engine import open_store

    store = open_store(cfg.db)
    _state["store"] = store.safe_url()  # named if the store fails later (a damaged file)
    return store


def _reader(cfg):
    """A read-only view of the store for status and compare: SQLite at the schema's head is read
    with sqlite3, without importing SQLAlchemy (opsdctl.store.open_read)."""
    from opsdctl.store.open_read import open_reader

    reader = open_reader(cfg.db)
    _state["store"] = reader.safe_url  # named if the store fails later (a damaged file)
    return reader


def _console(stderr: bool = False):
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = 160  # piped into a log or a CI page: don't squeeze tables to 80 columns
    return con


def _print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _warn(text: str) -> None:
    _console(stderr=True).print(f"[yellow]warning:[/yellow] {_escape(text)}")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


# --- init ---------------------------------------------------------------------------------


@app.command()
def init(
    profile: str = typer.Option("tiny", "--profile", "-p", help="Fixed setting to start from: tiny (CPU, offline) or qwen3-1.7b."),
    directory: Path = typer.Option(Path("."), "--dir", "-d", help="Where to write opsdctl.toml.", file_okay=False),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing opsdctl.toml."),
    no_recipes: bool = typer.Option(False, "--no-recipes", help="Do not copy the shipped recipes into recipes/."),
) -> None:
    """Write a commented starter opsdctl.toml (and copy the shipped recipes into recipes/)."""
    from opsdctl.cli.init import init_workspace

    written = init_workspace(directory, profile, force=force, copy_recipes=not no_recipes)
    con = _console()
    for line in written:
        con.print(f"wrote {_escape(line)}")
    con.print("next: [bold]opsdctl queue baseline[/bold], then [bold]opsdctl worker --drain[/bold]")


# --- queue --------------------------------------------------------------------------------


@app.command()
def queue(
    recipes: Optional[List[str]] = typer.Argument(None, metavar="RECIPE...", help="Recipe files, or names under recipes/.",
                                                  show_default=False),
    repeats: int = typer.Option(1, "--repeats", "-n", min=1, help="Chains per recipe.", callback=args.count("--repeats", 1, 1000)),
    seed: Optional[int] = typer.Option(None, "--seed", "-s", show_default=False, callback=args.seed,
                                       help="Seed of the first repeat [default: [queue] seed, else the profile's: 42 "
                                            "for qwen3-1.7b, 0 for tiny]."),
    same_seed: Optional[bool] = typer.Option(None, "--same-seed/--seed-per-repeat", show_default=False,
                                             help="Every repeat at exactly the seed (the scorer's protocol), or repeat r "
                                                  "at seed S+r [default: [queue] same_seed, else the profile's: same "
                                                  "for qwen3-1.7b, per repeat for tiny]."),
    priority: int = typer.Option(0, "--priority", "-p", help="Higher runs first; ties run in queue order.", callback=args.priority),
    force: bool = typer.Option(False, "--force", help="Record a changed recipe under an existing name as a new version."),
    partial: Optional[str] = typer.Option(None, "--partial", metavar="PROBLEMSxK",
                                          help="A cheap partial eval, e.g. 15x4 (15 problems, 4 samples each): "
                                               "screening only, never pooled with full runs or settled."),
    eval_only: Optional[str] = typer.Option(None, "--eval-only", metavar="CHECKPOINT_DIR|base",
                                            help="Evaluate an existing checkpoint (or the base model) without "
                                                 "training: one chain, scored as the variant that trained it."),
    name: Optional[str] = typer.Option(None, "--name", help="--eval-only: the variant a checkpoint trained outside "
                                                           "opsdctl is scored as [base: base]; --env: the "
                                                           "recipe's name [the file's name]."),
    env_file: Optional[str] = typer.Option(None, "--env", metavar="RECIPE_ENV",
                                           help="A recipe.env (KEY=VALUE lines, as the official re-training reads) "
                                                "queued as a recipe, checked by the same whitelist."),
    as_json: bool = typer.Option(False, "--json",
                                 help='Print [{"chain_id", "variant", "seed", "repeat", "partial", "eval_only", "checkpoint"}].'),
) -> None:
    """Queue train -> eval chains for recipes, freezing the code as it is now.

    A recipe's identity is the hash of its resolved knobs: queueing the same content again
    reuses its variant; the same name with different content is refused unless --force.
    With --eval-only, one eval-only chain of a checkpoint instead (no RECIPE).
    """
    from opsdctl.errors import UserError

    cfg = _config()
    if eval_only is not None:
        if recipes or env_file is not None:
            given = " ".join([*(recipes or []), *([f"--env {env_file}"] if env_file is not None else [])])
            raise UserError(f"queue --eval-only {eval_only}: takes no RECIPE ({given}); queue them apart")
        if repeats != 1:  # (--seed does not apply either: the seed is the training chain's)
            raise UserError("queue --eval-only: one checkpoint is one training run; --repeats does not apply")
        from opsdctl.run.eval_only import queue_eval_only

        result = queue_eval_only(cfg, lambda: _store(cfg), eval_only, name=name, partial_spec=partial,
                                 priority=priority)
    else:
        if name is not None and env_file is None:
            raise UserError("--name names an --eval-only checkpoint or an --env recipe.env; a TOML recipe is named "
                            "in its file")
        from opsdctl.run.enqueue import queue_recipes

        default_seed, default_same = cfg.seed_policy()
        result = queue_recipes(
            cfg, lambda: _store(cfg), recipes or [], repeats=repeats,
            seed=default_seed if seed is None else seed, same_seed=default_same if same_seed is None else same_seed,
            priority=priority, force=force, partial_spec=partial, env_file=env_file, env_name=name,
        )
    for note in result.notes:
        _warn(note) if "version" in note or "same knobs" in note else _console(stderr=True).print(_escape(note))
    from opsdctl.plan.fit_warning import unfit_warnings

    for warning in [*result.warnings, *unfit_warnings(cfg, _store(cfg).reader(), [c.chain_id for c in result.chains])]:
        _warn(warning)
    if as_json:
        _print_json([c.to_json() for c in result.chains])
        return
    con = _console()
    snap = result.snapshot
    if snap.kind == "git":
        what = f"git tree {snap.key[:12]} (HEAD {snap.head[:12] if snap.head else 'none'}{', with uncommitted changes' if snap.dirty else ''})"
    elif snap.kind == "copy":
        what = f"a copy {snap.key[:12]}"
    else:
        what = "the live code dir (snapshot_code = false)"
    for c in result.chains:
        con.print(f"queued chain [bold]{c.chain_id}[/bold]: {_escape(c.variant)} seed {c.seed} (repeat {c.repeat})"
                  + _eval_words(c))
    con.print(f"code: {what}")


def _eval_words(c) -> str:
    """', partial eval 15 x 4' / ', eval only of DIR' for the queue lines."""
    out = ""
    if c.eval_only:
        out += f", eval only of {_escape(c.checkpoint or '')}"
    if c.partial:
        out += f", [yellow]partial eval {c.partial['num_problems']} x {c.partial['k']}[/yellow] (screening only)"
    return out


# --- worker -------------------------------------------------------------------------------


@app.command()
def worker(
    drain: bool = typer.Option(False, "--drain", help="Exit when nothing runnable is queued."),
    policy: Optional[str] = typer.Option(None, "--policy", metavar="fifo|adaptive",
                                         help="Run order [default: [planner] policy]. adaptive: the chains that settle the "
                                              "most verdicts in the time left (value of information)."),
    futility: Optional[bool] = typer.Option(None, "--futility/--no-futility",
                                            help="Stop evaluations that cannot beat the baseline at a look (k = 4, 8 of 12)."),
    auto_repeat: Optional[bool] = typer.Option(None, "--auto-repeat/--no-auto-repeat",
                                               help="adaptive: queue extra repeats of undecided candidates when the queue has none."),
    auto_repeat_first: Optional[bool] = typer.Option(None, "--auto-repeat-first/--user-queue-first",
                                                     help="adaptive: let auto-repeat chains run before chains you "
                                                          "queued earlier (default: your queue first)."),
    try_every_variant: Optional[bool] = typer.Option(None, "--try-every-variant/--value-of-information",
                                                     help="adaptive: first runs of every queued variant before any "
                                                          "repeat, or (default) let value of information pick."),
) -> None:
    """Run queued chains, one at a time, on the configured GPUs (one worker per store).

    Before each chain and stage the planner checks that it fits in the time left (duration
    estimates from history) and that the GPUs are free (NVML); a chain that cannot finish is
    skipped with the reason. Ctrl-C (or SIGTERM) stops the running stage's process group and
    marks its chain interrupted; press it twice to skip the grace period.
    """
    import datetime as dt

    from opsdctl.errors import one_line
    from opsdctl.run.worker import Worker

    cfg = _config()
    if policy is not None and policy not in ("fifo", "adaptive"):
        from opsdctl.errors import UserError

        raise UserError(f"--policy {policy}: must be fifo or adaptive")
    flags = (policy, futility, auto_repeat, auto_repeat_first, try_every_variant)
    if any(f is not None for f in flags):
        from opsdctl.plan.planner import with_overrides

        cfg = with_overrides(cfg, policy_name=policy, futility=futility, auto_repeat=auto_repeat,
                             auto_repeat_first=auto_repeat_first, try_every_variant=try_every_variant)
    store = _store(cfg)
    con = _console()

    def report(msg: str) -> None:  # one line each, whatever a stage printed or a name holds
        con.print(f"[dim]{dt.datetime.now():%H:%M:%S}[/dim] {_escape(one_line(msg))}")

    w = Worker(cfg, store, drain=drain, report=report)
    ran = w.run()
    report(f"worker exiting: {ran} chain{'s' if ran != 1 else ''} run")
    if w.stop:  # stopped by a signal: the conventional 128 + signal number
        import signal

        raise typer.Exit(128 + signal.Signals[w.stop.reason].value)


# --- status -------------------------------------------------------------------------------


@app.command()
def status(
    as_json: bool = typer.Option(False, "--json", help="Print the status document as JSON."),
    recent: int = typer.Option(10, "--recent", "-r", min=0, help="How many finished chains to show.", callback=args.count("--recent")),
    show_all: bool = typer.Option(False, "--all", "-a", help="Show every finished chain."),
) -> None:
    """The running chain (stage, elapsed, progress), the queue in run order, recent results, time left."""
    from opsdctl.cli.status import gather_status

    cfg = _config()
    doc = gather_status(cfg, _reader(cfg), None if show_all else recent)
    if as_json:
        _print_json(doc)
        return
    from opsdctl.cli.render import render_status

    render_status(_console(), doc)


@app.command()
def wait(
    chain_ids: Optional[List[int]] = typer.Argument(None, metavar="[CHAIN_ID]...", help="Chains to wait for.", callback=args.chain_ids,
                                                    show_default=False),
    all_chains: bool = typer.Option(False, "--all", "-a", help="Every queued or running chain, until none is "
                                                               "(chains queued meanwhile too)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="MIN", min=0,
                                            help="Give up after this many minutes (exit 124; the chains keep running)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"ok", "timed_out", "waited_seconds", "chains": [...]}.'),
) -> None:
    """Block until chains end; print each one's outcome; exit 1 if any failed (for scripts and agents).

    Exit 0 when every chain succeeded (or was stopped as futile), 1 when any failed, was cancelled,
    skipped or interrupted, 124 on --timeout. A chain interrupted and re-queued (its worker died)
    is followed to its re-run.
    """
    from opsdctl.errors import UserError
    from opsdctl.run.wait import wait_chains

    if bool(chain_ids) == all_chains:
        raise UserError("opsdctl wait: name the chains (opsdctl wait 3 4) or pass --all, not both or neither")
    cfg = _config()
    store = _store(cfg)
    err = _console(stderr=True)
    warned, absent_since = [], []

    def tick(pending, worker):
        import time

        if worker["state"] == "running":
            absent_since.clear()
        elif not absent_since:
            absent_since.append(time.monotonic())
        if absent_since and time.monotonic() - absent_since[0] >= 5 and not warned:  # not a worker starting up
            warned.append(True)
            _warn(f"no worker is running on this store ({worker['text']}): start `opsdctl worker`, or these "
                  "chains never end")
        if spinner is not None:
            first = pending[0]
            prog = (first.get("progress") or {}).get("text") or first["state"]
            spinner.update(_escape(f"waiting for {len(pending)} chain{'s' if len(pending) != 1 else ''}: chain "
                                   f"{first['final_chain_id']} {first['variant']} {first.get('stage') or ''} {prog}"))

    spinner = err.status("waiting...") if err.is_terminal and not as_json else None
    if spinner is not None:
        spinner.start()
    try:
        result = wait_chains(store, None if all_chains else chain_ids, None if timeout is None else timeout * 60, on_tick=tick)
    finally:
        if spinner is not None:
            spinner.stop()
    if as_json:
        _print_json(result.to_json())
    else:
        from opsdctl.cli.render import render_wait

        render_wait(_console(), result.to_json())
    raise typer.Exit(result.exit_code)


# --- cancel / requeue ---------------------------------------------------------------------


@app.command()
def cancel(
    chain_ids: List[int] = typer.Argument(..., metavar="CHAIN_ID", help="Chains to cancel.", callback=args.chain_ids),
    grace: Optional[float] = typer.Option(None, "--grace", min=0, help="Seconds between TERM and KILL [default: from config]."),
) -> None:
    """Cancel chains: a queued one never runs; a running one gets TERM, then KILL after the grace period.

    Only the stage's own process group (and processes carrying its token) is signalled.
    """
    from opsdctl.run.cancel import cancel_chain
    from opsdctl.run.executors import cancel_stopper

    cfg = _config()
    store = _store(cfg)
    con = _console()
    grace = cfg.kill_grace_seconds if grace is None else grace
    remote_stop = cancel_stopper(cfg, store, grace, chain_ids)  # executor = "ray": through the chain's actor
    failed = None
    with con.status("cancelling...") as spinner:
        for cid in chain_ids:
            try:
                res = cancel_chain(store, cid, grace, on_wait=lambda text: spinner.update(_escape(text)),
                                   remote_stop=remote_stop)
            except Exception as exc:
                from opsdctl.errors import UserError

                if not isinstance(exc, UserError) or len(chain_ids) == 1:
                    raise
                failed = exc
                con.print(f"[red]{_escape(str(exc))}[/red]")
                continue
            con.print(_escape(res.text()))
    if failed is not None:
        raise typer.Exit(2)


@app.command()
def requeue(
    chain_id: int = typer.Argument(..., metavar="CHAIN_ID", help="A finished chain (failed, cancelled, interrupted, skipped...).",
                                   callback=args.chain_ids),
    priority: Optional[int] = typer.Option(None, "--priority", "-p", help="Priority of the new chain [default: the old one's].",
                                           callback=args.priority),
    eval_only: bool = typer.Option(False, "--eval-only", help="Only evaluate the checkpoint the chain already trained "
                                                             "(its eval timed out, failed or was skipped)."),
    partial: Optional[str] = typer.Option(None, "--partial", metavar="PROBLEMSxK",
                                          help="--eval-only: a partial eval [default: the old chain's setting]."),
    full: bool = typer.Option(False, "--full", help="--eval-only: the full protocol (e.g. after a partial screening)."),
    current_commands: bool = typer.Option(False, "--current-commands",
                                          help="Run the stage commands opsdctl.toml holds now, not the ones frozen when "
                                               "the chain was queued (e.g. after fixing a broken eval command)."),
    as_json: bool = typer.Option(False, "--json",
                                 help='Print {"chain_id", "variant", "seed", "repeat", "partial", "eval_only", "checkpoint"}.'),
) -> None:
    """Queue a fresh copy of a finished chain: same variant, seed and code snapshot."""
    cfg = _config()
    current = cfg if current_commands else None
    if eval_only:
        from opsdctl.run.eval_only import requeue_eval_only
        from opsdctl.run.snapshot_lock import snapshot_lock

        with snapshot_lock(cfg.runs_dir):  # a concurrent `gc` cannot take its code or checkpoint away
            new = requeue_eval_only(_store(cfg), chain_id, partial_spec=partial, full=full, priority=priority,
                                    current=current)
    else:
        if partial or full:
            from opsdctl.errors import UserError

            raise UserError("requeue: --partial and --full choose the evaluation of --eval-only; add --eval-only")
        from opsdctl.run.enqueue import requeue_chain

        new = requeue_chain(_store(cfg), chain_id, priority, runs_dir=cfg.runs_dir, current=current)
    if as_json:
        _print_json(new.to_json())
        return
    _console().print(f"queued chain [bold]{new.chain_id}[/bold]: {_escape(new.variant)} seed {new.seed} "
                     f"(re-run of chain {chain_id}){_eval_words(new)}")


@app.command()
def gc(
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Only show what would be removed."),
    keep: List[str] = typer.Option([], "--keep", metavar="VARIANT", help="Keep this variant's stage outputs (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"dry_run", "freed_bytes", "items": [...]}.'),
) -> None:
    """Remove code snapshots and stage outputs (checkpoints) that no queued or running chain needs.

    Logs, recipe files and the store stay, so status, show and compare are unchanged.
    """
    from opsdctl.run.gc import collect

    cfg = _config()
    report = collect(cfg, _store(cfg), dry_run=dry_run, keep=keep)
    if as_json:
        _print_json(report.to_json())
        return
    from opsdctl.cli.render import render_gc

    render_gc(_console(), report)


# --- export -------------------------------------------------------------------------------


@app.command("export-recipe")
def export_recipe_cmd(
    variant: Optional[str] = typer.Argument(None, metavar="[VARIANT]", help="Variant name (latest version) or NAME@vN."),
    leader: bool = typer.Option(False, "--leader", help="Export the bet instead of a named variant: the candidate with the "
                                                        "highest forecast official mean, or the baseline's empty recipe "
                                                        "when none is forecast above it; the header gives the forecast."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="PATH", help="Write recipe.env here [default: stdout]."),
    method_defaults: Optional[Path] = typer.Option(None, "--method-defaults", metavar="PATH", help="Also write the method knobs as a [method] TOML our trainer reads."),
    force: bool = typer.Option(False, "--force", help="Export even without a succeeded chain."),
    all_keys: bool = typer.Option(False, "--all-keys", help="Write every whitelisted key, not only those that differ from the release."),
) -> None:
    """Write a variant as the official recipe.env: the keys that differ from the released recipe (or --all-keys), stable order, a header with its hash."""
    from opsdctl.errors import UserError
    from opsdctl.fsutil import atomic_write_text
    from opsdctl.recipes.export import export_recipe

    if leader == (variant is not None):
        raise UserError("export-recipe: give a VARIANT or --leader (not both, not neither); "
                        "--leader exports the candidate with the highest forecast official mean")
    if leader and all_keys:
        raise UserError("export-recipe --leader --all-keys: --all-keys needs a named VARIANT")
    cfg = _config()
    _refuse_directories(("-o", output), ("--method-defaults", method_defaults))
    store = _store(cfg)
    if leader:
        text, label, variant = _leader_text(cfg, store)
        if variant is None and method_defaults is not None:
            raise UserError("export-recipe --leader --method-defaults: the leader is the baseline's empty recipe, "
                            "which has no method knobs to write; leave --method-defaults out")
        if output is None:
            sys.stdout.write(text)
        else:
            atomic_write_text(output, text)
            _console(stderr=True).print(f"wrote {_escape(str(output))} ({_escape(label)})")
        if method_defaults is None:
            return
    exp = export_recipe(store, variant, force=force or leader, all_keys=all_keys)
    warning = exp.warning()
    if warning and method_defaults is None:
        _warn(warning)
    if method_defaults is not None:
        atomic_write_text(method_defaults, exp.method_defaults)
        _console(stderr=True).print(f"wrote method defaults to {_escape(str(method_defaults))}")
    if leader:
        return
    if output is None:
        sys.stdout.write(exp.recipe_env)
    else:
        atomic_write_text(output, exp.recipe_env)
        _console(stderr=True).print(f"wrote {_escape(str(output))} ({exp.label}, sha256 {exp.hash[:12]})")


def _leader_text(cfg, store) -> tuple[str, str, Optional[str]]:
    """(recipe.env text with the forecast header, the leader's label, its variant or None) of
    `export-recipe --leader`: the same rule and header as the worker's auto-export."""
    import datetime as dt

    from opsdctl.plan.report import compare_doc
    from opsdctl.run.auto_export import pick_leader, render_file

    reader = store.reader()
    report = compare_doc(cfg, reader, None, None)
    kinds = {v.label: v.kind for v in reader.all_variants()}
    lead = pick_leader(report, lambda label: kinds.get(label) == "recipe")
    when = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    text = render_file(store, report, lead, when, "the leader by the forecast", source="opsdctl export-recipe --leader")
    return text, lead.name, lead.variant


def _refuse_directories(*options) -> None:
    from opsdctl.errors import UserError

    for flag, path in options:
        if path is not None and path.is_dir():
            raise UserError(f"{flag} {path}: is a directory; name the file to write (a path inside it)")


# --- listings -----------------------------------------------------------------------------


@app.command()
def variants(as_json: bool = typer.Option(False, "--json", help="Print the variants as JSON.")) -> None:
    """Recorded variants: name, version, hash, knobs that differ from the released recipe, runs."""
    from opsdctl.cli.listing import list_variants

    cfg = _config()
    rows = list_variants(_store(cfg))
    if as_json:
        _print_json(rows)
        return
    from opsdctl.cli.render import render_variants

    render_variants(_console(), rows)


@app.command("recipes")
def recipes_cmd(as_json: bool = typer.Option(False, "--json", help="Print the recipes as JSON.")) -> None:
    """Recipe files under recipes_dir (and the shipped ones), validated, with their hashes.
    Exits 1 when any of them is invalid (after listing them all), so scripts and CI notice."""
    from opsdctl.cli.listing import list_recipes

    cfg = _config()
    rows = list_recipes(cfg)
    if as_json:
        _print_json(rows)
    else:
        from opsdctl.cli.render import render_recipes

        render_recipes(_console(), rows)
    bad = sum(1 for r in rows if r.get("error"))
    if bad:
        if not as_json:
            _console(stderr=True).print(f"[red]{bad} of {len(rows)} recipes are invalid[/red] (exit 1)")
        raise typer.Exit(1)


@app.command()
def logs(
    chain_id: int = typer.Argument(..., metavar="CHAIN_ID", callback=args.chain_ids),
    stage: Optional[str] = typer.Option(None, "--stage", help="train or eval [default: the chain's current/last stage]."),
    lines: int = typer.Option(40, "--lines", "-n", min=0, help="How many lines from the end (0 = all).",
                              callback=args.count("--lines")),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as the log grows, until the stage ends."),
) -> None:
    """Print a chain's stage log (its path is in `opsdctl status --json`)."""
    from opsdctl.cli.listing import follow_log, stage_log

    cfg = _config()
    store = _store(cfg)
    path, text = stage_log(store, chain_id, stage, lines)
    sys.stdout.write(text)
    sys.stdout.flush()
    if follow:
        follow_log(store, chain_id, path, sys.stdout)


@app.command()
def budget(
    as_json: bool = typer.Option(False, "--json", help="Print the budget as JSON."),
    restart_clock: bool = typer.Option(False, "--restart-clock", help="hours budgets: start counting again now."),
) -> None:
    """Time left, from [budget] remaining_file, deadline or hours, minus the margin."""
    import time

    from opsdctl.plan.budget import CLOCK_KEY, budget_now, clock_start
    from opsdctl.store.engine import set_meta

    cfg = _config()
    store = _store(cfg)
    if restart_clock:
        with store.write() as s:
            set_meta(s, CLOCK_KEY, repr(time.time()) if cfg.budget.kind == "hours" else None)
    view = budget_now(cfg.budget, clock_start(store.reader()))
    if as_json:
        _print_json({**view.to_json(), "text": view.text()})
        return
    _console().print(f"budget: {_escape(view.text())}")


@app.command()
def compare(
    variants: Optional[List[str]] = typer.Argument(None, metavar="[VARIANT]...",
                                                   help="Variants to compare [default: every scored one]."),
    baseline: Optional[str] = typer.Option(None, "--baseline", "-b", help="Baseline variant [default: [baseline] variant]."),
    family: Optional[str] = typer.Option(None, "--family", metavar="SPEC",
                                         help='What the verdicts correct for: "all" (every candidate tried), '
                                              '"since:2025-06-01" or "a,b,c" [default: [compare] family].'),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="PNG", help="Also draw the runs, means and 95% CIs to this PNG."),
    pool_code: bool = typer.Option(False, "--pool-code", help="Pool a variant's runs across code trees and stage commands "
                                                             "(by default each code state is its own candidate, e.g. "
                                                             "`token-clip @3f2a1c`)."),
) -> None:
    """Rank candidates against the baseline and the run-to-run noise floor.

    One shared run-to-run sigma pooled over every variant in the store (the published sd as a
    prior while the local scatter allows it), the published mean with a setup offset, t
    intervals, P(beat baseline), and verdicts valid under repeated looks and corrected over
    every candidate tried, with how many more runs would settle each question. Partial
    evaluations are listed apart: screening only, never pooled, never a verdict. A candidate is
    a variant on one code state (code tree and stage commands): runs on edited code are another
    candidate.
    """
    from opsdctl.cli.docs import compare_report

    cfg = _config()
    report = compare_report(cfg, _reader(cfg), variants, baseline, family=family, pool_code=pool_code)
    if plot is not None:
        from opsdctl.stats.plots import plot_compare

        plot_compare(report, plot)
    if as_json:
        _print_json(report)
        return
    from opsdctl.stats.compare import render_compare

    con = _console()
    render_compare(report, con)
    from opsdctl.cli.render import render_training

    render_training(con, report.get("training", []))
    if plot is not None:
        con.print(f"plot: {_escape(str(plot))}")


@app.command()
def diff(
    chain_a: int = typer.Argument(..., metavar="CHAIN_A", callback=args.chain_ids),
    chain_b: int = typer.Argument(..., metavar="CHAIN_B", callback=args.chain_ids),
    patch: bool = typer.Option(False, "--patch", help="Also print the full code diff (git snapshots)."),
    as_json: bool = typer.Option(False, "--json", help="Print the differences as JSON."),
) -> None:
    """What differs between two chains: knobs, seed and eval settings, the code each checkpoint was
    trained with (diff stat of the two snapshots) and the stage commands; and whether compare
    counts them as one candidate."""
    from opsdctl.run.chain_diff import chain_diff

    cfg = _config()
    doc = chain_diff(_store(cfg), chain_a, chain_b, patch=patch)
    if as_json:
        _print_json(doc)
        return
    from opsdctl.cli.render import render_diff

    render_diff(_console(), doc)


@app.command()
def code(
    chain: int = typer.Argument(..., metavar="CHAIN", callback=args.chain_ids),
    to: Path = typer.Option(..., "--to", metavar="DIR", help="A new or empty directory to write the code into."),
    as_json: bool = typer.Option(False, "--json", help='Print {"chain_id", "trained_by", "kind", "tree", "commit", "files", "dest"}.'),
) -> None:
    """Write out the code a chain's checkpoint was trained with (its code snapshot, git or copy), so
    a winner whose method lives in code can be restored into the workspace before submitting."""
    from opsdctl.run.code_export import write_code

    cfg = _config()
    done = write_code(_store(cfg), cfg.runs_dir, chain, to)
    if as_json:
        _print_json(done.to_json())
        return
    via = f" (trained by chain {done.trained_by})" if done.trained_by != done.chain_id else ""
    _console().print(f"wrote {done.files} files of chain {done.chain_id}'s code{via}, {done.kind} tree "
                     f"{done.tree[:12]}, to {_escape(done.dest)}")


@app.command()
def gpus(as_json: bool = typer.Option(False, "--json", help="Print the inventory as JSON.")) -> None:
    """The GPUs (NVML), their free memory and the processes holding them (pid, name, MiB).

    CUDA indices follow PCI bus order (stages run with CUDA_DEVICE_ORDER=PCI_BUS_ID), within an
    inherited CUDA_VISIBLE_DEVICES when set. Looks only: opsdctl never signals a process it did
    not start.
    """
    from opsdctl.plan.gpus import gpu_report

    cfg = _config()
    doc = gpu_report(cfg.devices, cfg.min_free_mib).to_json()
    if as_json:
        _print_json(doc)
        return
    from opsdctl.cli.render import render_gpus

    render_gpus(_console(), doc)


@app.command()
def durations(
    as_json: bool = typer.Option(False, "--json", help="Print estimates and estimate-vs-actual as JSON."),
    recent: int = typer.Option(20, "--recent", "-r", min=0, help="How many recent stages to list.", callback=args.count("--recent")),
) -> None:
    """Stage duration estimates from history (median and high quantile per cost key), and how
    the estimates admission used compare with what the stages actually took."""
    from opsdctl.plan.durations import durations_doc

    cfg = _config()
    doc = durations_doc(cfg, _store(cfg).reader(), recent)
    if as_json:
        _print_json(doc)
        return
    from opsdctl.cli.render import render_durations

    render_durations(_console(), doc)


@app.command()
def simulate(
    sessions: int = typer.Option(200, "--sessions", "-n", min=1, help="Simulated sessions per policy.",
                                 callback=args.count("--sessions", 1)),
    seed: int = typer.Option(0, "--seed", help="Base seed (session i uses seed + i).", callback=args.seed),
    hours: float = typer.Option(6.0, "--hours", help="Budget of one session."),
    effects: Optional[str] = typer.Option(None, "--effects", metavar="E1,E2,...",
                                          help="True effects of the candidates, points [default: 0,0,+1,+2,+3,-2]."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="Also write simulate.json and simulate.md here."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Replay 6-hour, 4-GPU sessions under a fake clock: FIFO by hand vs the planner's policies.

    Runs the worker's own loop and gate (opsdctl.plan.loop.WorkerLoop, opsdctl.plan.planner.PlannerGate:
    order, auto-repeat, admission, futility) with a fake clock and a fake executor over simulated
    stage durations and scores; needs no config or store.
    """
    from opsdctl.plan.simulate import DEFAULT_EFFECTS, run_benchmark, write_results

    eff = DEFAULT_EFFECTS if effects is None else tuple(float(x) for x in effects.split(",") if x.strip())
    doc = run_benchmark(sessions=sessions, seed=seed, hours=hours, effects=eff)
    if out is not None:
        write_results(doc, out)
    if as_json:
        _print_json(doc)
        return
    sys.stdout.write(doc["markdown"] + "\n")


@app.command()
def show(
    variant: str = typer.Argument(..., metavar="VARIANT", help="NAME (latest version) or NAME@vN."),
    as_json: bool = typer.Option(False, "--json", help="Print the variant and its runs as JSON."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="PNG",
                                        help="Also draw its runs' training curves (loss, KL, clipping, learning rate, "
                                             "your [stages.train.metrics]) to this PNG, the baseline's greyed behind."),
) -> None:
    """One variant: its recipe and every run, with per-problem counts and training statistics."""
    from opsdctl.stats.scores import show_doc

    cfg = _config()
    store = _store(cfg)
    doc = show_doc(store, variant)
    drawn = None
    if plot is not None:
        from opsdctl.errors import UserError
        from opsdctl.stats.train_plot import plot_training

        base = None
        if cfg.baseline_variant and cfg.baseline_variant.split("@")[0] != doc["name"]:
            try:
                base = show_doc(store, cfg.baseline_variant)
            except UserError:  # not run yet: curves of the variant alone
                base = None
        drawn = plot_training(doc, plot, base)
        if drawn is None:
            _warn(f"{doc['variant']}: no run has a training curve yet; no plot written")
    if as_json:
        _print_json(doc)
        return
    from opsdctl.cli.render import render_show

    render_show(_console(), doc)
    if drawn is not None:
        _console().print(f"plot: {_escape(str(drawn))}")


@app.command()
def chain(
    chain_id: int = typer.Argument(..., metavar="CHAIN", callback=args.chain_ids),
    lines: int = typer.Option(40, "--lines", "-n", min=0, help="How many lines of its current stage's log.",
                              callback=args.count("--lines")),
    as_json: bool = typer.Option(False, "--json", help="Print the chain, its run and its log's tail as JSON."),
) -> None:
    """One chain: its stages and progress, score and per-problem counts, training statistics,
    recipe check, code, and the tail of its current stage's log."""
    from opsdctl.cli.docs import chain_doc

    cfg = _config()
    doc = chain_doc(_store(cfg), chain_id, lines)
    if as_json:
        _print_json(doc)
        return
    from opsdctl.cli.render import render_chain

    render_chain(_console(), doc)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback needs a token."),
    port: int = typer.Option(8765, "--port", "-p", min=1, max=65535, help="Port to listen on."),
    token: Optional[str] = typer.Option(None, "--token", envvar="OPSDCTL_SERVE_TOKEN", show_envvar=True,
                                        help="Secret every request must carry (?token=...); prefer the environment "
                                             "variable: a command line is visible to every user."),
) -> None:
    """A live, read-only web dashboard of this store: the session, compare, each variant and chain.

    Every page has a `?format=json` twin equal to the CLI's `--json` (status, compare, show, chain).
    """
    from opsdctl.cli.serve import serve as run_server

    cfg = _config()
    run_server(cfg, host, port, token, lambda text: _console(stderr=True).print(_escape(text)))


@app.command()
def demo(
    directory: Path = typer.Option(Path("opsdctl-demo"), "--dir", "-d", metavar="DIR",
                                   help="A fresh workspace for the demo (refused if it already holds one)."),
) -> None:
    """The whole job on this machine, no GPU, no downloads: a tiny model, three recipes, compare, export.

    Builds (once) a tiny Qwen3-architecture model warm-started on generated arithmetic,
    queues the baseline x3, token-clip x2 and cosine x2, runs the real trainer and evaluator
    through the worker, then prints status, the compare table (and PNG) and the winner's recipe.env.
    """
    from opsdctl.cli import demo as d
    from opsdctl.cli.render import render_status
    from opsdctl.cli.status import gather_status
    from opsdctl.config import load_config
    from opsdctl.fsutil import atomic_write_text
    from opsdctl.cli.docs import compare_report
    from opsdctl.recipes.export import export_recipe
    from opsdctl.stats.plots import plot_compare

    con = _console()
    t0 = __import__("time").time()
    paths = d.prepare_workspace(directory)
    con.print(f"workspace: [bold]{_escape(str(paths.root))}[/bold]")
    d.build_tiny_assets(con, paths.worker_log)
    cfg = load_config(paths.config)
    store = _store(cfg)
    total = d.queue_demo(cfg, store, con)
    d.run_worker(paths, cfg, store, total, con)

    con.print("[bold]4/4[/bold] results\n")
    reader = store.reader()
    render_status(con, gather_status(cfg, reader, None))
    report = compare_report(cfg, reader)
    con.print()
    from opsdctl.stats.compare import render_compare

    render_compare(report, con)
    plot_compare(report, paths.plot, title="opsdctl demo (tiny profile): avg@4 on 30 generated problems")
    best = d.best_variant(report)
    if best:
        exp = export_recipe(store, best)
        atomic_write_text(paths.recipe_env, exp.recipe_env)
        atomic_write_text(paths.method_defaults, exp.method_defaults)
        con.print(f"\n[bold]best variant: {_escape(best)}[/bold] -> {_escape(str(paths.recipe_env))}")
        con.print(_escape(exp.recipe_env.rstrip()))
        if exp.off_default_method:  # method knobs cannot travel in recipe.env: they ride as code defaults
            knob_list = ", ".join(f"{k} = {v!r}" for k, v in exp.off_default_method.items())
            con.print(f"[yellow]method knobs ({_escape(knob_list)}) cannot travel in recipe.env: written as "
                      f"the trainer's defaults to {_escape(str(paths.method_defaults))}[/yellow]")
    con.print(f"\n[bold]where everything is[/bold] (took {(__import__('time').time() - t0) / 60:.1f} min)")
    for label, path in (("config", paths.config), ("store", paths.db), ("logs and outputs", paths.runs),
                        ("worker log", paths.worker_log), ("compare plot", paths.plot),
                        ("recipe.env", paths.recipe_env), ("method defaults", paths.method_defaults)):
        con.print(f"  {label:17s} {_escape(str(path))}")
    con.print(f"  next: cd {_escape(str(paths.root))} && opsdctl status / opsdctl compare / opsdctl show token-clip")


def main() -> None:
    from opsdctl.errors import EXIT_USER_ERROR, UserError

    try:
        app()
    except UserError as exc:
        _error_line(str(exc))
        sys.exit(getattr(exc, "exit_code", EXIT_USER_ERROR))
    except Exception as exc:
        from opsdctl.store.damage import damaged_store_error

        damage = damaged_store_error(exc, _state.get("store"))
        if damage is None:
            raise  # a bug: the traceback is the report
        _error_line(damage)
        sys.exit(EXIT_USER_ERROR)


def _error_line(text: str) -> None:
    from rich.console import Console

    from opsdctl.errors import one_line

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[red]error:[/red] {_escape(one_line(text))}")


if __name__ == "__main__":
    main()
