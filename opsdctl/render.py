"""Rich tables for humans. Each function takes the same plain data `--json` prints."""

from __future__ import annotations

import datetime as dt
from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from opsdctl.budget import fmt_duration

STATE_STYLE = {
    "queued": "cyan",
    "running": "bold yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
    "interrupted": "dark_orange",
    "skipped": "dim",
}


def _state(state: str) -> str:
    return f"[{STATE_STYLE.get(state, 'white')}]{state}[/]"


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


def render_status(con: Console, doc: dict) -> None:
    budget = doc["budget"]
    worker = doc["worker"]
    con.print(f"[bold]budget[/bold]  {escape(budget['text'])}")
    wstyle = {"running": "green", "dead": "red"}.get(worker["state"], "dim")
    con.print(f"[bold]worker[/bold]  [{wstyle}]{escape(worker['text'])}[/]")
    chains = doc["chains"]
    running = [c for c in chains if c["state"] == "running"]
    queued = [c for c in chains if c["state"] == "queued"]
    finished = [c for c in chains if c["state"] not in ("running", "queued")]

    if running:
        t = Table(title="running", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("chain", "variant", "seed", "stage", "elapsed", "progress", "log"):
            t.add_column(col)
        for c in running:
            prog = (c.get("progress") or {}).get("text", "")
            frac = (c.get("progress") or {}).get("fraction")
            if frac is not None:
                prog += f" ({frac:.0%})"
            elapsed = fmt_duration(c.get("stage_elapsed_seconds") or c.get("elapsed_seconds") or 0)
            t.add_row(str(c["chain_id"]), escape(c["variant"]), str(c["seed"]), c.get("stage") or "-",
                      elapsed, escape(prog), escape(c.get("log") or ""))
        con.print(t)
        for c in running:
            if c.get("note"):
                con.print(f"[red]chain {c['chain_id']}: {escape(c['note'])}[/red]")
    else:
        con.print("[dim]nothing running[/dim]")

    if queued:
        t = Table(title=f"queued ({len(queued)}, in run order)", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("chain", "variant", "seed", "repeat", "priority", "queued"):
            t.add_column(col)
        for c in queued:
            extra = f" (re-run of {c['requeued_from']})" if c.get("requeued_from") else ""
            t.add_row(str(c["chain_id"]), escape(c["variant"]) + extra, str(c["seed"]), str(c["repeat"]),
                      str(c["priority"]), _local(c.get("queued_at")))
        con.print(t)
    else:
        con.print("[dim]queue empty[/dim]")

    if finished:
        t = Table(title="finished (newest first)", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("chain", "variant", "seed", "state", "score", "took", "finished", "reason"):
            t.add_column(col, overflow="fold")
        for c in finished:
            took = fmt_duration(c["elapsed_seconds"]) if c.get("elapsed_seconds") is not None else ""
            t.add_row(str(c["chain_id"]), escape(c["variant"]), str(c["seed"]), _state(c["state"]), _score(c),
                      took, _local(c.get("finished_at")), escape(c.get("reason") or ""))
        con.print(t)


def _changes_text(changes: dict) -> str:
    from opsdctl.knobs import format_value

    return ", ".join(f"{k}={format_value(v)}" for k, v in changes.items()) or "(released recipe)"


def render_variants(con: Console, rows: list[dict]) -> None:
    if not rows:
        con.print("[dim]no variants yet: opsdctl queue RECIPE[/dim]")
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("variant", "hash", "changes", "runs", "scores"):
        t.add_column(col, overflow="fold")
    t.add_column("description", no_wrap=True, overflow="ellipsis", max_width=48)
    for r in rows:
        runs = f"{r['succeeded']}/{r['chains']}" + (f" (+{r['queued']} queued)" if r["queued"] else "")
        scores = " ".join(f"{x:.2f}" for x in r["scores"])
        t.add_row(escape(r["variant"]), r["hash"][:12], escape(_changes_text(r["changes"])), runs, scores,
                  escape(r["description"]))
    con.print(t)


def render_recipes(con: Console, rows: list[dict]) -> None:
    if not rows:
        con.print("[dim]no recipes found[/dim]")
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("recipe", "extends", "changes", "hash"):
        t.add_column(col, overflow="fold")
    t.add_column("description", no_wrap=True, overflow="ellipsis", max_width=48)
    for r in rows:
        name = escape(r["name"]) + (" [dim](shipped)[/dim]" if r["shipped"] else "")
        if r["error"]:
            t.add_row(name, "", f"[red]{escape(r['error'])}[/red]", "", "")
            continue
        t.add_row(name, escape(" -> ".join(r["extends"])), escape(_changes_text(r["changes"])), r["hash"][:12],
                  escape(r["description"]))
    con.print(t)


def _num(x, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def render_show(con: Console, doc: dict) -> None:
    from opsdctl.listing import recipe_changes

    con.print(f"[bold]{escape(doc['variant'])}[/bold]  {doc['hash'][:12]}  {escape(doc['description'] or '')}")
    con.print(f"changes: {escape(_changes_text(recipe_changes(doc['hparams'], doc['method'])))}")
    if not doc["runs"]:
        con.print("[dim]no chains yet[/dim]")
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("chain", "seed", "state", "avg@k", "k x n", "loss", "KL", "clipped", "per-problem correct"):
        t.add_column(col, overflow="fold")
    for r in doc["runs"]:
        tr = r["train"] or {}
        kn = f"{r['k']} x {r['n_problems']}" if r["k"] else "-"
        if r["partial"]:
            kn += " [yellow]partial[/yellow]"
        counts = " ".join(str(p["correct"]) for p in r["problems"]) if r["problems"] else "-"
        state = _state(r["state"]) + (f" [dim]({escape(r['reason'])})[/dim]" if r["reason"] else "")
        t.add_row(str(r["chain_id"]), str(r["seed"]), state, _num(r["score"], "{:.2f}"), kn,
                  _num(tr.get("final_loss"), "{:.4g}"), _num(tr.get("mean_kl"), "{:.4g}"),
                  _num(tr.get("frac_clipped"), "{:.1%}"), counts)
    con.print(t)
