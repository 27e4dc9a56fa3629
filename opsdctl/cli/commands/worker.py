"""`opsdctl worker`: run queued chains on the configured GPUs, one worker per store."""

from __future__ import annotations

from typing import Optional

import typer

from opsdctl.cli.app import App
from opsdctl.cli.console import console, escape


def command(
    ctx: typer.Context,
    drain: bool = typer.Option(False, "--drain", help="Exit when nothing runnable is queued."),
    policy: Optional[str] = typer.Option(None, "--policy", metavar="fifo|adaptive",
                                         help="Run order [default: [planner] policy]. adaptive: the next chain by `opsdctl advise`'s "
                                              "ranking (expected gain of the submission's official score)."),
    futility: Optional[bool] = typer.Option(None, "--futility/--no-futility",
                                            help="Stop evaluations that cannot beat the baseline at a look (k = 4, 8 of 12)."),
    auto_repeat: Optional[bool] = typer.Option(None, "--auto-repeat/--no-auto-repeat",
                                               help="adaptive: queue the repeat `opsdctl advise` ranks first when no queued chain is."),
    auto_repeat_first: Optional[bool] = typer.Option(None, "--auto-repeat-first/--user-queue-first",
                                                     help="adaptive: let auto-repeat chains run before chains you "
                                                          "queued earlier (default: your queue first)."),
    try_every_variant: Optional[bool] = typer.Option(None, "--try-every-variant/--value-of-information",
                                                     help="adaptive: first runs of every queued variant before any "
                                                          "repeat, or (default) let `opsdctl advise`'s ranking pick."),
    objective: Optional[str] = typer.Option(None, "--objective", metavar="submission|verdicts",
                                            help="adaptive: spend the budget on the submission's expected official "
                                                 "score (default), or on verdicts (fewer ideas, more runs each; "
                                                 "pair it with --auto-repeat-first)."),
) -> None:
    """Run queued chains, one at a time, on the configured GPUs (one worker per store).

    Before each chain and stage the planner checks that it fits in the time left (duration
    estimates from history) and that the GPUs are free (NVML); a chain that cannot finish is
    skipped with the reason. Ctrl-C (or SIGTERM) stops the running stage's process group and
    marks its chain interrupted; press it twice to skip the grace period.
    """
    import datetime as dt

    from opsdctl.errors import one_line
    from opsdctl.daemon.worker import Worker

    app = App.of(ctx)
    cfg = app.config()
    from opsdctl.config import PLANNER_OBJECTIVES, PLANNER_POLICIES
    from opsdctl.errors import UserError

    for flag, value, allowed in (("--policy", policy, PLANNER_POLICIES), ("--objective", objective, PLANNER_OBJECTIVES)):
        if value is not None and value not in allowed:
            raise UserError(f"{flag} {value}: must be {' or '.join(allowed)}")
    flags = (policy, futility, auto_repeat, auto_repeat_first, try_every_variant, objective)
    if any(f is not None for f in flags):
        from opsdctl.plan.planner import with_overrides

        cfg = with_overrides(cfg, policy_name=policy, futility=futility, auto_repeat=auto_repeat,
                             auto_repeat_first=auto_repeat_first, try_every_variant=try_every_variant,
                             objective=objective)
    from opsdctl.daemon.host_limits import chains_at_once, check_host

    check_host(cfg, chains=chains_at_once(cfg))  # before anything is written
    store = app.store(cfg)
    con = console()

    def report(msg: str) -> None:  # one line each, whatever a stage printed or a name holds
        con.print(f"[dim]{dt.datetime.now():%H:%M:%S}[/dim] {escape(one_line(msg))}")

    w = Worker(cfg, store, drain=drain, report=report)
    ran = w.run()
    report(f"worker exiting: {ran} chain{'s' if ran != 1 else ''} run")
    if w.stop:  # stopped by a signal: the conventional 128 + signal number
        import signal

        raise typer.Exit(128 + signal.Signals[w.stop.reason].value)
