"""`opsdctl queue`: recipes (or a recipe.env, or a checkpoint) -> queued chains, the code frozen as it is now."""

from __future__ import annotations

from typing import List, Optional

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.cells import eval_words
from opsdctl.cli.console import console, escape, print_json, warn


def command(
    ctx: typer.Context,
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
                                 help='Print [{"chain_id", "variant", "seed", "repeat", "partial", "eval_only", "checkpoint", "eval_draw"}].'),
) -> None:
    """Queue train -> eval chains for recipes, freezing the code as it is now.

    A recipe's identity is the hash of its resolved knobs: queueing the same content again
    reuses its variant; the same name with different content is refused unless --force.
    With --eval-only, one eval-only chain of a checkpoint instead (no RECIPE).
    """
    from opsdctl.errors import UserError

    app = App.of(ctx)
    cfg = app.config()
    if eval_only is not None:
        if recipes or env_file is not None:
            given = " ".join([*(recipes or []), *([f"--env {env_file}"] if env_file is not None else [])])
            raise UserError(f"queue --eval-only {eval_only}: takes no RECIPE ({given}); queue them apart")
        if repeats != 1:  # (--seed does not apply either: the seed is the training chain's)
            raise UserError("queue --eval-only: one checkpoint is one training run; --repeats does not apply")
        from opsdctl.client.eval_only import queue_eval_only

        result = queue_eval_only(cfg, lambda: app.store(cfg), eval_only, name=name, partial_spec=partial,
                                 priority=priority)
    else:
        if name is not None and env_file is None:
            raise UserError("--name names an --eval-only checkpoint or an --env recipe.env; a TOML recipe is named "
                            "in its file")
        from opsdctl.client.enqueue import queue_recipes

        default_seed, default_same = cfg.seed_policy()
        result = queue_recipes(
            cfg, lambda: app.store(cfg), recipes or [], repeats=repeats,
            seed=default_seed if seed is None else seed, same_seed=default_same if same_seed is None else same_seed,
            priority=priority, force=force, partial_spec=partial, env_file=env_file, env_name=name,
        )
    for note in result.notes:
        warn(note) if "version" in note or "same knobs" in note else console(stderr=True).print(escape(note))
    from opsdctl.cli.fit_warning import unfit_warnings

    for warning in [*result.warnings, *unfit_warnings(cfg, app.reader(cfg), [c.chain_id for c in result.chains])]:
        warn(warning)
    if as_json:
        print_json([c.to_json() for c in result.chains])
        return
    con = console()
    snap = result.snapshot
    if snap.kind == "git":
        what = f"git tree {snap.key[:12]} (HEAD {snap.head[:12] if snap.head else 'none'}{', with uncommitted changes' if snap.dirty else ''})"
    elif snap.kind == "copy":
        what = f"a copy {snap.key[:12]}"
    else:
        what = "the live code dir (snapshot_code = false)"
    for c in result.chains:
        con.print(f"queued chain [bold]{c.chain_id}[/bold]: {escape(c.variant)} seed {c.seed} (repeat {c.repeat})"
                  + eval_words(c))
    con.print(f"code: {what}")
