"""The `opsdctl` command line: builds the Typer app and registers one command per module of
`opsdctl/cli/commands/` (the module's name, `_` as `-`, is the command's name).

A command module parses, calls core functions, builds its view and renders it (rich, or `--json`).
Heavy modules are imported inside the commands so `opsdctl --help` and `opsdctl status` start
fast; nothing here (or anything it imports) touches torch, transformers or vllm.
A UserError is one red line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from opsdctl.cli import plain_params
from opsdctl.cli.app import App
from opsdctl.cli.commands import (advise, budget, cancel, chain, code, compare, demo, diff, durations, export_recipe, gc,
                                  gpus, init, logs, queue, recipes, requeue, serve, show, simulate, status, variants,
                                  wait, worker)

# In the order `opsdctl --help` lists them.
COMMANDS = (init, queue, worker, status, wait, cancel, requeue, gc, export_recipe, variants, recipes, logs, budget,
            compare, advise, diff, code, gpus, durations, simulate, show, chain, serve, demo)

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


plain_params.install()  # plain option values skip typer's pydantic adapters (80 ms a command)


def command_name(module) -> str:
    return module.__name__.rsplit(".", 1)[-1].replace("_", "-")


for _module in COMMANDS:
    app.command(command_name(_module))(_module.command)


@app.callback()
def _root(
    ctx: typer.Context,
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", envvar="OPSDCTL_CONFIG", metavar="PATH",
        help="Config file [default: ./opsdctl.toml].", show_default=False,
    ),
) -> None:
    App.of(ctx).config_path = config


def main() -> None:
    from opsdctl.cli.console import error_line
    from opsdctl.errors import EXIT_USER_ERROR, UserError

    run = App()
    try:
        app(obj=run)
    except UserError as exc:
        error_line(str(exc))
        sys.exit(getattr(exc, "exit_code", EXIT_USER_ERROR))
    except Exception as exc:
        from opsdctl.store.damage import damaged_store_error

        damage = damaged_store_error(exc, run.store_url)  # a store that fails after it opened
        if damage is None:
            raise  # a bug: the traceback is the report
        error_line(damage)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    main()
