"""`opsdctl requeue`: a fresh queued copy of a finished chain (or an eval-only chain of its checkpoint)."""

from __future__ import annotations

from typing import Optional

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.cells import eval_words
from opsdctl.cli.console import console, escape, print_json


def command(
    ctx: typer.Context,
    chain_id: int = typer.Argument(..., metavar="CHAIN_ID", help="A finished chain (failed, cancelled, interrupted, skipped...).",
                                   callback=args.chain_ids),
    priority: Optional[int] = typer.Option(None, "--priority", "-p", help="Priority of the new chain [default: the old one's].",
                                           callback=args.priority),
    eval_only: bool = typer.Option(False, "--eval-only", help="Only evaluate the checkpoint the chain already trained "
                                                             "(its eval timed out, failed or was skipped)."),
    partial: Optional[str] = typer.Option(None, "--partial", metavar="PROBLEMSxK",
                                          help="--eval-only: a partial eval [default: the old chain's setting]."),
    full: bool = typer.Option(False, "--full", help="--eval-only: the full protocol (e.g. after a partial screening)."),
    reeval: bool = typer.Option(False, "--reeval", help="Evaluate the chain's scored checkpoint again with fresh samples "
                                                       "(our evaluator only); compare pools the evals as one run."),
    current_commands: bool = typer.Option(False, "--current-commands",
                                          help="Run the stage commands opsdctl.toml holds now, not the ones frozen when "
                                               "the chain was queued (e.g. after fixing a broken eval command)."),
    as_json: bool = typer.Option(False, "--json",
                                 help='Print {"chain_id", "variant", "seed", "repeat", "partial", "eval_only", "checkpoint", "eval_draw"}.'),
) -> None:
    """Queue a fresh copy of a finished chain: same variant, seed and code snapshot (--eval-only: only
    its eval; --reeval: its scored checkpoint's eval again, with fresh samples)."""
    app = App.of(ctx)
    cfg = app.config()
    current = cfg if current_commands else None
    if reeval:
        from opsdctl.client.eval_only import requeue_reeval
        from opsdctl.errors import UserError
        from opsdctl.identity.snapshot_lock import snapshot_lock

        if eval_only or partial or full or current_commands:
            raise UserError("requeue --reeval: a full eval with the chain's own frozen commands, the same as its first; "
                            "drop --eval-only/--partial/--full/--current-commands")
        with snapshot_lock(cfg.runs_dir):  # a concurrent `gc` cannot take its code or checkpoint away
            new = requeue_reeval(app.store(cfg), cfg, chain_id, priority=priority)
    elif eval_only:
        from opsdctl.client.eval_only import requeue_eval_only
        from opsdctl.identity.snapshot_lock import snapshot_lock

        with snapshot_lock(cfg.runs_dir):  # a concurrent `gc` cannot take its code or checkpoint away
            new = requeue_eval_only(app.store(cfg), chain_id, partial_spec=partial, full=full, priority=priority,
                                    current=current)
    else:
        if partial or full:
            from opsdctl.errors import UserError

            raise UserError("requeue: --partial and --full choose the evaluation of --eval-only; add --eval-only")
        from opsdctl.client.enqueue import requeue_chain

        new = requeue_chain(app.store(cfg), chain_id, priority, runs_dir=cfg.runs_dir, current=current,
                            recipes_dir=cfg.recipes_dir)
    if as_json:
        print_json(new.to_json())
        return
    console().print(f"queued chain [bold]{new.chain_id}[/bold]: {escape(new.variant)} seed {new.seed} "
                     f"({'re-eval' if reeval else 're-run'} of chain {chain_id}){eval_words(new)}")
