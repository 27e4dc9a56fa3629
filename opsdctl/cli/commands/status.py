"""`opsdctl status`: what runs now, what is queued (in run order), what finished, time left: the
status document (opsdctl.cli.documents.status) drawn with rich, or printed with `--json`."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Optional

import typer

from opsdctl.cli import args
from opsdctl.cli.app import App
from opsdctl.cli.cells import state_cell
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console



def command(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print the status document as JSON."),
    recent: int = typer.Option(10, "--recent", "-r", min=0, help="How many finished chains to show.", callback=args.count("--recent")),
    show_all: bool = typer.Option(False, "--all", "-a", help="Show every finished chain."),
) -> None:
    """The running chain (stage, elapsed, progress), the queue in run order, recent results, time left."""
    from opsdctl.cli.documents.status import gather_status

    app = App.of(ctx)
    cfg = app.config()
    doc = gather_status(cfg, app.reader(cfg), None if show_all else recent)
    if as_json:
        print_json(doc)
        return
    render_status(console(), doc)


def render_status(con: Console, doc: dict) -> None:
    from rich.table import Table

    from opsdctl.plan.budget import fmt_duration

    budget = doc["budget"]
    worker = doc["worker"]
    con.print(f"[bold]budget[/bold]  {escape(budget['text'])}")
    if budget.get("hold") and any(c["state"] == "queued" for c in doc["chains"]):
        con.print(f"[yellow]holding[/yellow]  {escape(budget['hold'])}")
    wstyle = {"running": "green", "dead": "red"}.get(worker["state"], "dim")
    con.print(f"[bold]worker[/bold]  [{wstyle}]{escape(worker['text'])}[/]")
    chains = doc["chains"]
    running = [c for c in chains if c["state"] == "running"]
    queued = [c for c in chains if c["state"] == "queued"]
    finished = [c for c in chains if c["state"] not in ("running", "queued")]

    if running:
        t = Table(title="running", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("chain", "variant", "seed", "stage", "elapsed", "progress", "ends", "log"):
            t.add_column(col, no_wrap=col == "ends")
        for c in running:
            prog = (c.get("progress") or {}).get("text", "")
            frac = (c.get("progress") or {}).get("fraction")
            if frac is not None:
                prog += f" ({frac:.0%})"
            prog = escape(prog)
            if c.get("stalled"):
                st = c["stalled"]
                prog += (f" [bold red]stalled: no progress for {fmt_duration(st['for_s'])} "
                         f"(usually every {fmt_duration(st['interval_s'])})[/]")
            elapsed = fmt_duration(c.get("stage_elapsed_seconds") or c.get("elapsed_seconds") or 0)
            t.add_row(str(c["chain_id"]), _variant_cell(c), str(c["seed"]), c.get("stage") or "-",
                      elapsed, prog, _in(c.get("projected_end_in_s")), escape(c.get("log") or ""))
        con.print(t)
        for c in running:
            if c.get("note"):
                con.print(f"[red]chain {c['chain_id']}: {escape(c['note'])}[/red]")
    else:
        con.print("[dim]nothing running[/dim]")

    planner = doc.get("planner")
    if queued and planner:
        render_queue_timeline(con, queued, planner)
    elif queued:
        t = Table(title=f"queued ({len(queued)}, in run order)", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("chain", "variant", "seed", "repeat", "priority", "queued"):
            t.add_column(col)
        for c in queued:
            extra = f" (re-run of {c['requeued_from']})" if c.get("requeued_from") else ""
            t.add_row(str(c["chain_id"]), _variant_cell(c) + extra, str(c["seed"]), str(c["repeat"]),
                      str(c["priority"]), _local(c.get("queued_at")))
        con.print(t)
    else:
        con.print("[dim]queue empty[/dim]")
    render_frozen_settings(con, queued)
    if planner:
        render_slots(con, planner)
        render_auto_repeat(con, planner)
    if doc.get("gpus"):
        render_gpu_lines(con, doc["gpus"])
    if doc.get("export"):
        render_export_line(con, doc["export"])
    elif doc.get("bet"):
        render_bet_line(con, doc["bet"])

    if finished:
        t = Table(title="finished (newest first)", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("chain", "variant", "seed", "state", "score", "took", "finished", "reason"):
            t.add_column(col, overflow="fold")
        for c in finished:
            took = fmt_duration(c["elapsed_seconds"]) if c.get("elapsed_seconds") is not None else ""
            t.add_row(str(c["chain_id"]), _variant_cell(c), str(c["seed"]), state_cell(c["state"]), _score(c),
                      took, _local(c.get("finished_at")), escape(c.get("reason") or ""))
        con.print(t)


def _local(iso: Optional[str]) -> str:
    if not iso:
        return ""
    t = dt.datetime.fromisoformat(iso).astimezone()
    today = dt.datetime.now().astimezone().date()
    return t.strftime("%H:%M:%S") if t.date() == today else t.strftime("%Y-%m-%d %H:%M")


def _score(c: dict) -> str:
    if c.get("score") is None:
        return ""
    s = f"{c['score']:.2f}"
    if c.get("k"):
        s += f" @{c['k']}"
    if c.get("partial"):
        s += " [yellow](partial)[/]"
    return s


def _variant_cell(c: dict) -> str:
    """The variant, with what the chain evaluates when it is not a full train -> eval chain."""
    text = escape(c["variant"])
    if c.get("eval_draw"):
        text += f" [dim](re-eval, draw {c['eval_draw']})[/dim]"
    elif c.get("eval_only"):
        text += " [dim](eval only)[/dim]"
    ev = c.get("eval")
    if ev:
        text += f" [yellow](partial {ev['num_problems']}x{ev['k']})[/yellow]"
    return text


def _in(seconds) -> str:
    """'+12m (14:05)': a projected time from now, with the local clock time."""
    from opsdctl.plan.budget import fmt_duration

    if seconds is None:
        return "-"
    at = dt.datetime.now() + dt.timedelta(seconds=seconds)
    return f"+{fmt_duration(seconds)} ({at:%H:%M})"


def render_frozen_settings(con, queued: list[dict]) -> None:
    """Queued chains that will run stage settings other than opsdctl.toml holds now, grouped."""
    groups: dict[tuple, list[int]] = {}
    for c in queued:
        if c.get("stage_settings_differ"):
            groups.setdefault(tuple(c["stage_settings_differ"]), []).append(c["chain_id"])
    for differ, ids in groups.items():
        which = f"chain{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"
        con.print(f"[yellow]{which}: run{'' if len(ids) > 1 else 's'} the stage settings frozen when queued; "
                  f"opsdctl.toml now has another {escape(', '.join(differ))}[/yellow] (cancel and queue again to take it)")


def render_export_line(con: Console, ex: dict) -> None:
    """[export]: what the worker last wrote to the submission recipe.env, and when; or when it starts."""
    last = ex.get("last")
    if last and last.get("path") == ex["path"]:
        fc = _forecast_words(last.get("forecast"))
        if last.get("variant"):
            what = f"{escape(last['leader'])} ({fc}" + (f", {last['verdict']}" if last.get("verdict") else "") + ")"
        else:
            what = f"{escape(last['leader'])} (the released recipe, {fc})"
        con.print(f"[bold]export[/bold]  {escape(ex['path'])} <- {what} at {_local(last['written_at'])}"
                  + ("" if ex["active"] else f"; {escape(ex['when'])}"))
    elif ex["active"]:
        con.print(f"[bold]export[/bold]  {escape(ex['path'])}: due now ({escape(ex['when'])}); the worker writes it")
    else:
        con.print(f"[bold]export[/bold]  {escape(ex['path'])}: nothing written yet; {escape(ex['when'])}")
    bet = ex.get("bet")
    if bet and not (last and last.get("path") == ex["path"]):
        render_bet_line(con, bet)


def render_bet_line(con: Console, bet: dict) -> None:
    """The bet: what the submission rule picks now, and its forecast official score."""
    what = escape(bet["leader"]) + ("" if bet.get("variant") else " (the released recipe)")
    f = bet.get("forecast") or {}
    best = f", P(best) {f['p_best']:.2f}" if f.get("p_best") is not None else ""
    con.print(f"[bold]bet[/bold]  {what}: {_forecast_words(f)}{best} "
              "[dim](what export-recipe --leader submits now)[/dim]")


def _forecast_words(f) -> str:
    """'forecast 56.10 [54.02, 58.18]' (the official 5-run mean and its 80% interval)."""
    if not f or f.get("mean") is None:
        return "no forecast"
    return f"forecast {f['mean']:.2f} [{f['low80']:.2f}, {f['high80']:.2f}]"


def render_queue_timeline(con: Console, queued: list[dict], planner: dict) -> None:
    """The queue in the planner's order with projected start/end, and what will not fit."""
    from rich.table import Table

    from opsdctl.plan.budget import fmt_duration

    by_id = {c["chain_id"]: c for c in queued}
    entries = [e for e in planner.get("timeline", []) if e["state"] == "queued" and e["chain_id"] in by_id]
    title = (f"queued ({len(queued)}, {planner.get('order', 'queue order')}; policy {planner.get('policy')}"
             + (", objective verdicts" if planner.get("objective") == "verdicts" else "")
             + (", futility on" if planner.get("futility") else "") + ")")
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for col in ("chain", "variant", "seed", "starts", "ends", "p50/high", "fits"):
        t.add_column(col, overflow="fold", no_wrap=col in ("starts", "ends", "p50/high"))
    for e in entries:
        c = by_id[e["chain_id"]]
        why = (e.get("reason") or "").removeprefix("will not fit: ").removesuffix(" at its turn")
        fits = "[green]yes[/green]" if e["fits"] else f"[red]no[/red]: {escape(why)}"
        t.add_row(str(e["chain_id"]), _variant_cell(c), str(c["seed"]), _in(e["start_in_s"]), _in(e["end_in_s"]),
                  f"{fmt_duration(e['median_s'])}/{fmt_duration(e['high_s'])}", fits)
    con.print(t)


def render_slots(con: Console, planner: dict) -> None:
    """Each GPU slot's projected timeline (several chains at once: gpus_per_chain), one line a slot:
    'GPU 0  chain 3 train until +12m (14:05), chain 3 eval until +40m (14:33), chain 7 train ...'."""
    slots = planner.get("slots") or []
    if len(slots) < 2:
        return  # one slot of every GPU: the queue above is its timeline
    con.print(f"[bold]slots[/bold] [dim]({escape(planner.get('layout') or '')})[/dim]")
    for s in slots:
        parts = [f"chain {x['chain_id']} {x['stage']} until {_in(x['end_in_s'])}" for x in s["timeline"]]
        gpus = ",".join(str(g) for g in s["gpus"])
        con.print(f"  GPU {gpus}  " + (escape(", ".join(parts)) if parts else "[dim]free[/dim]"))


def render_auto_repeat(con: Console, planner: dict) -> None:
    """Where auto-repeat will insert its chains, and why the worker would idle with budget left."""
    auto = planner.get("auto_repeat_next")
    if auto:
        what = escape(auto["variant"]) if auto.get("variant") else "a chain"
        if auto.get("action") == "re-eval":
            what = f"a re-eval of {what} (fresh eval samples)"
        con.print(f"[bold]auto-repeat[/bold]  {what} {escape(auto['at'])}: {escape(auto['why'])}")
    if planner.get("idle"):
        con.print(f"[yellow]idle[/yellow]  {escape(planner['idle'])}")


def render_gpu_lines(con: Console, gpus: dict) -> None:
    """One line per GPU with its holders; the note when the gate is off for want of NVML."""
    if gpus.get("note") and gpus.get("devices"):
        con.print(f"[yellow]gpus[/yellow]    {escape(gpus['note'])}")
    for g in gpus.get("gpus", []):
        procs = ", ".join(f"pid {p['pid']} {p['name']} ({p['used_mib']} MiB)" for p in g["processes"]) or "no processes"
        idx = "-" if g["index_cuda"] is None else str(g["index_cuda"])
        con.print(f"[bold]gpu {idx}[/bold]   {g['free_mib']}/{g['total_mib']} MiB free; {escape(procs)}")
    if gpus.get("blocked"):
        con.print(f"[red]gpus not ready:[/red] {escape(gpus['blocked'])}")
