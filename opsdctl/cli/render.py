"""Rich tables for humans. Each function takes the same plain data `--json` prints."""

from __future__ import annotations

import datetime as dt
from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from opsdctl.plan.budget import fmt_duration

STATE_STYLE = {
    "queued": "cyan",
    "running": "bold yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
    "interrupted": "dark_orange",
    "skipped": "dim",
    "stopped-futile": "blue",
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


def _variant_cell(c: dict) -> str:
    """The variant, with what the chain evaluates when it is not a full train -> eval chain."""
    text = escape(c["variant"])
    if c.get("eval_only"):
        text += " [dim](eval only)[/dim]"
    ev = c.get("eval")
    if ev:
        text += f" [yellow](partial {ev['num_problems']}x{ev['k']})[/yellow]"
    return text


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


def render_status(con: Console, doc: dict) -> None:
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
        render_auto_repeat(con, planner)
    if doc.get("gpus"):
        render_gpu_lines(con, doc["gpus"])
    if doc.get("export"):
        render_export_line(con, doc["export"])

    if finished:
        t = Table(title="finished (newest first)", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("chain", "variant", "seed", "state", "score", "took", "finished", "reason"):
            t.add_column(col, overflow="fold")
        for c in finished:
            took = fmt_duration(c["elapsed_seconds"]) if c.get("elapsed_seconds") is not None else ""
            t.add_row(str(c["chain_id"]), _variant_cell(c), str(c["seed"]), _state(c["state"]), _score(c),
                      took, _local(c.get("finished_at")), escape(c.get("reason") or ""))
        con.print(t)


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
        what = escape(bet["leader"]) + ("" if bet.get("variant") else " (the released recipe)")
        con.print(f"[bold]bet[/bold]  {what}: {_forecast_words(bet.get('forecast'))}")


def _forecast_words(f) -> str:
    """'forecast 56.10 [54.02, 58.18]' (the official 5-run mean and its 80% interval)."""
    if not f or f.get("mean") is None:
        return "no forecast"
    return f"forecast {f['mean']:.2f} [{f['low80']:.2f}, {f['high80']:.2f}]"


def _in(seconds) -> str:
    """'+12m (14:05)': a projected time from now, with the local clock time."""
    if seconds is None:
        return "-"
    at = dt.datetime.now() + dt.timedelta(seconds=seconds)
    return f"+{fmt_duration(seconds)} ({at:%H:%M})"


def render_queue_timeline(con: Console, queued: list[dict], planner: dict) -> None:
    """The queue in the planner's order with projected start/end, and what will not fit."""
    by_id = {c["chain_id"]: c for c in queued}
    entries = [e for e in planner.get("timeline", []) if e["state"] == "queued" and e["chain_id"] in by_id]
    title = (f"queued ({len(queued)}, {planner.get('order', 'queue order')}; policy {planner.get('policy')}"
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


def render_auto_repeat(con: Console, planner: dict) -> None:
    """Where auto-repeat will insert its chains, and why the worker would idle with budget left."""
    auto = planner.get("auto_repeat_next")
    if auto:
        what = escape(auto["variant"]) if auto.get("variant") else "a chain"
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


def render_gpus(con: Console, doc: dict) -> None:
    """`opsdctl gpus`: the inventory with holders (the same data as `--json`)."""
    if not doc["available"]:
        con.print(f"[yellow]no GPU inventory:[/yellow] {escape(doc['error'] or '')}")
        if doc.get("note"):
            con.print(escape(doc["note"]))
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("cuda", "nvml", "name", "uuid", "used MiB", "free MiB", "total MiB", "processes (pid name MiB)"):
        t.add_column(col, overflow="fold")
    for g in doc["gpus"]:
        procs = ", ".join(f"{p['pid']} {p['name']} {p['used_mib']}" for p in g["processes"]) or "-"
        t.add_row("-" if g["index_cuda"] is None else str(g["index_cuda"]), str(g["index_nvml"]), escape(g["name"]),
                  g["uuid"][:16], str(g["used_mib"]), str(g["free_mib"]), str(g["total_mib"]), escape(procs))
    con.print(t)
    cvd = doc.get("cuda_visible_devices")
    con.print(f"configured devices: {doc['devices']!r}, min_free_mib {doc['min_free_mib']}"
              + (f"; inherited CUDA_VISIBLE_DEVICES={escape(cvd)}" if cvd is not None else ""))
    if doc.get("ready") is True:
        con.print("[green]ready[/green]: every configured GPU has enough free memory")
    elif doc.get("ready") is False:
        con.print(f"[red]not ready:[/red] {escape(doc['blocked'])}")


def render_durations(con: Console, doc: dict) -> None:
    t = Table(title="stage duration estimates", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("cost key", "n", "median", "high", "min", "max", "source"):
        t.add_column(col)
    for r in doc["estimates"]:
        t.add_row(escape(r["cost_key"]), str(r["n"]), fmt_duration(r["median_s"]), fmt_duration(r["high_s"]),
                  fmt_duration(r["min_s"]), fmt_duration(r["max_s"]), r["source"])
    con.print(t)
    d = doc["defaults_s"]
    con.print(f"rule: {escape(doc['rule'])}; defaults: train {fmt_duration(d['train'])}, eval {fmt_duration(d['eval'])}")
    a = doc["accuracy"]
    if a["stages_with_estimate"]:
        con.print(f"estimate vs actual: {a['stages_with_estimate']} stages, {a['over_estimate']} ran longer than "
                  f"estimated, mean error {a['mean_error_s']:+.0f}s, mean |error| {a['mean_abs_pct']:.0f}%")


def _changes_text(changes: dict) -> str:
    from opsdctl.recipes.knobs import format_value

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
        if r.get("partial_scores"):  # screening runs: marked, never mixed in with the full scores
            scores += (" " if scores else "") + " ".join(
                f"[yellow]{p['score']:.2f} (partial {p['n_problems']}x{p['k']})[/yellow]" for p in r["partial_scores"])
        changes = {"base": "(base model)", "checkpoint": "(outside checkpoint)"}.get(r.get("kind"), _changes_text(r["changes"]))
        t.add_row(escape(r["variant"]), r["hash"][:12], escape(changes), runs, scores,
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
    from opsdctl.cli.listing import recipe_changes

    con.print(f"[bold]{escape(doc['variant'])}[/bold]  {doc['hash'][:12]}  {escape(doc['description'] or '')}")
    if doc.get("kind", "recipe") == "recipe":
        con.print(f"changes: {escape(_changes_text(recipe_changes(doc['hparams'], doc['method'])))}")
    else:  # evaluated with --eval-only: no recipe behind it
        con.print("kind: " + ("the base model (untrained)" if doc["kind"] == "base"
                              else "a checkpoint trained outside opsdctl (knobs unknown)"))
    if not doc["runs"]:
        con.print("[dim]no chains yet[/dim]")
        return
    t = Table(show_edge=False, pad_edge=False)
    extra = sorted({n for r in doc["runs"] for n in ((r["train"] or {}).get("metrics") or {})} - {"kl", "frac_clipped"})
    gpu_stages = [st for st in ("train", "eval") if any(st in (r.get("gpu") or {}) for r in doc["runs"])]
    cols = (["chain", "seed", "state", "avg@k", "k x n", "code", "loss", "KL", "clipped"] + extra
            + [f"{st} GPU peak/util" for st in gpu_stages] + ["recipe", "cmds", "per-problem correct"])
    for col in cols:
        t.add_column(col, overflow="fold")
    for r in doc["runs"]:
        tr = r["train"] or {}
        kn = f"{r['k']} x {r['n_problems']}" if r["k"] else "-"
        if not r["k"] and r.get("eval"):  # not scored yet: what it was asked for
            kn = f"{r['eval']['k']} x {r['eval']['num_problems']}"
        if r["partial"]:
            kn += " [yellow]partial[/yellow]"
        if r.get("eval_only"):
            kn += " [dim]eval only[/dim]"
        counts = " ".join(str(p["correct"]) for p in r["problems"]) if r["problems"] else "-"
        state = _state(r["state"]) + (f" [dim]({escape(r['reason'])})[/dim]" if r["reason"] else "")
        t.add_row(str(r["chain_id"]), str(r["seed"]), state, _num(r["score"], "{:.2f}"), kn, _code_cell(r.get("code")),
                  _num(tr.get("final_loss"), "{:.4g}"), _num(tr.get("mean_kl"), "{:.4g}"),
                  _num(tr.get("frac_clipped"), "{:.1%}"),
                  *[_num(((tr.get("metrics") or {}).get(n) or {}).get("mean"), "{:.4g}") for n in extra],
                  *[_gpu_cell((r.get("gpu") or {}).get(st)) for st in gpu_stages],
                  _recipe_status(r.get("recipe_check")), (r.get("commands_hash") or "-")[:8], counts)
    con.print(t)
    if any(g.get("attribution") == "device" for r in doc["runs"] for g in (r.get("gpu") or {}).values()):
        con.print("[dim]* GPU memory read as the device's used memory minus what it held when the stage started "
                  "(NVML listed none of the stage's own processes)[/dim]")
    hashes = {r.get("commands_hash") for r in doc["runs"]}
    if len(hashes) > 1:
        con.print(f"[yellow]these runs were made with {len(hashes)} different sets of stage commands (cmds)[/yellow]")
    for r in doc["runs"]:
        check = r.get("recipe_check") or {}
        if check.get("status") == "not verified":
            why = "; ".join(check.get("unchecked") or []) or "the train log shows none of the recipe's values"
            con.print(f"[dim]chain {r['chain_id']}: recipe not verified: {escape(why)}[/dim]")
    render_code_snapshots(con, [r.get("code") for r in doc["runs"]] + [r.get("eval_code") for r in doc["runs"]])


def render_wait(con: Console, doc: dict) -> None:
    """`opsdctl wait`: one line per chain with its outcome, then the verdict."""
    for c in doc["chains"]:
        via = f" (re-run as chain {c['final_chain_id']})" if c["final_chain_id"] != c["chain_id"] else ""
        score = ""
        if c.get("score") is not None:
            score = f", avg@{c['k']} = {c['score']:.2f}" + (" (partial)" if c.get("partial") else "")
        reason = f": {escape(c['reason'])}" if c.get("reason") and c["state"] != "succeeded" else ""
        con.print(f"chain {c['chain_id']}{via} {escape(c['variant'])} seed {c['seed']}: {_state(c['state'])}"
                  f"{score}{reason}")
    if doc["timed_out"]:
        left = [c for c in doc["chains"] if c["state"] in ("queued", "running")]
        con.print(f"[yellow]timed out after {fmt_duration(doc['waited_seconds'])}[/yellow]: {len(left)} chain(s) "
                  "still queued or running")
    elif not doc["chains"]:
        con.print("[dim]nothing queued or running[/dim]")
    elif doc["ok"]:
        con.print(f"[green]all {len(doc['chains'])} ended well[/green] (waited {fmt_duration(doc['waited_seconds'])})")
    else:
        bad = [c for c in doc["chains"] if c["state"] not in ("succeeded", "stopped-futile")]
        con.print(f"[red]{len(bad)} of {len(doc['chains'])} did not succeed[/red]")


def _gpu_cell(g: Optional[dict]) -> str:
    """'9300 MiB 87%' from a stage's NVML figures; '*' marks memory read as the device's (no
    per-process figures from NVML)."""
    if not g or g.get("peak_mib") is None:
        return "-"
    mark = "*" if g.get("attribution") == "device" else ""
    util = "" if g.get("util_pct") is None else f" {g['util_pct']:.0f}%"
    return f"{g['peak_mib']:.0f} MiB{mark}{util}"


def render_training(con: Console, rows: list[dict]) -> None:
    """compare's training columns: per candidate, the mean of its runs' training statistics
    (only the columns some run has)."""
    rows = [r for r in rows if r["runs"] or r.get("gpu_peak_mib") is not None]
    if not rows:
        return
    names = sorted({n for r in rows for n in r["metrics"]})
    cols = [("loss", lambda r: _num(r["final_loss"], "{:.4g}")), ("KL", lambda r: _num(r["mean_kl"], "{:.4g}")),
            ("clipped", lambda r: _num(r["frac_clipped"], "{:.1%}"))]
    cols += [(n, lambda r, n=n: _num(r["metrics"].get(n), "{:.4g}")) for n in names if n not in ("kl", "frac_clipped")]
    cols += [("step s", lambda r: _num(r["step_seconds"], "{:.1f}")),
             ("GPU peak MiB", lambda r: _num(r.get("gpu_peak_mib"), "{:.0f}")),
             ("GPU util", lambda r: _num(r.get("gpu_util_pct"), "{:.0f}%"))]
    cols = [(c, f) for c, f in cols if any(f(r) != "-" for r in rows)]
    t = Table(title="Training (mean over each candidate's runs)", title_justify="left")
    for col in ["variant", "runs"] + [c for c, _ in cols]:
        t.add_column(col, justify="left" if col == "variant" else "right")
    for r in rows:
        name = escape(r["name"]) + (" [yellow](partial)[/yellow]" if r.get("partial") else "")
        t.add_row(name, str(r["runs"]), *[f(r) for _, f in cols])
    con.print(t)


def _code_cell(code: Optional[dict]) -> str:
    if not code:
        return "-"
    return "@" + code["short"] + (" [yellow]dirty[/yellow]" if code["dirty"] else "")


def render_code_snapshots(con: Console, codes: list) -> None:
    """One line per distinct code snapshot: tree, commit, HEAD, dirty flag and a short diff stat."""
    seen = {}
    for c in codes:
        if c and c["tree"] not in seen:
            seen[c["tree"]] = c
    for c in seen.values():
        if c["kind"] == "live":
            con.print(f"code @live: the live code dir {escape(c['tree'])} (snapshot_code = false): not recorded")
            continue
        line = f"code @{c['short']}: {c['kind']} {c['tree'][:12]}"
        if c.get("commit"):
            line += f", commit {c['commit'][:12]}"
        if c.get("head"):
            line += f" on HEAD {c['head'][:12]}"
        if c["dirty"]:
            line += f", [yellow]dirty[/yellow]: {escape(c['diffstat'])}" + (f" ({escape(c['files'])})" if c["files"] else "")
        elif c["kind"] == "git":
            line += ", clean"
        con.print(line)


def _recipe_status(check: Optional[dict]) -> str:
    status = (check or {}).get("status")
    return {"verified": "[green]verified[/green]", "mismatch": "[red]not applied[/red]",
            "not verified": "[yellow]not verified[/yellow]"}.get(status, "-")


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def render_gc(con: Console, report) -> None:
    verb = "would free" if report.dry_run else "freed"
    if not report.items:
        con.print(f"nothing to remove (kept {report.kept_snapshots} snapshot(s) and the outputs of "
                  f"{report.kept_run_dirs} chain(s) that live chains need)")
        return
    t = Table(show_edge=False, pad_edge=False)
    for col in ("what", "path", "size", "why"):
        t.add_column(col, overflow="fold")
    by_kind: dict[str, list] = {}
    for item in report.items:
        by_kind.setdefault(item.kind, []).append(item)
    for kind, items in by_kind.items():
        if kind == "object":  # one row for all of them: there can be thousands
            t.add_row("objects", f"{len(items)} file contents", _bytes(sum(i.bytes for i in items)), escape(items[0].why))
            continue
        for item in items:
            t.add_row(kind, escape(str(item.path)), _bytes(item.bytes), escape(item.why))
    con.print(t)
    con.print(f"{'dry run: ' if report.dry_run else ''}{verb} {_bytes(report.freed_bytes)}; kept "
              f"{report.kept_snapshots} snapshot(s) and the outputs of {report.kept_run_dirs} chain(s) live chains need")


def render_diff(con: Console, doc: dict) -> None:
    """`opsdctl diff`: the same data as `--json`, one section per kind of difference."""
    from opsdctl.recipes.knobs import format_value
    from opsdctl.run.chain_diff import identity_words

    a, b = doc["a"], doc["b"]
    con.print(f"[bold]chain {a['chain_id']}[/bold] {escape(a['variant'])} seed {a['seed']} ({a['state']})  vs  "
              f"[bold]chain {b['chain_id']}[/bold] {escape(b['variant'])} seed {b['seed']} ({b['state']})")
    con.print(escape(identity_words(doc)))
    if doc["knobs"]:
        t = Table(title="knobs", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("knob", f"chain {a['chain_id']}", f"chain {b['chain_id']}"):
            t.add_column(col)
        for k in doc["knobs"]:
            fmt = lambda v: "-" if v is None else format_value(v)  # noqa: E731
            t.add_row(f"{k['knob']} [dim]({k['section']})[/dim]", escape(fmt(k["a"])), escape(fmt(k["b"])))
        con.print(t)
    elif doc.get("knobs_note"):
        con.print(f"knobs: {escape(doc['knobs_note'])}")
    else:
        con.print("knobs: the same")
    def setting(what, v) -> str:
        if what == "eval":
            return "full" if not v else f"partial {v['num_problems']}x{v['k']}"
        return "-" if v is None else str(v)

    for d in doc["settings"]:
        con.print(f"{d['what']}: {escape(setting(d['what'], d['a']))} vs {escape(setting(d['what'], d['b']))}")
    code = doc["code"]
    if code["same"]:
        con.print(f"code: the same (@{code['a']['short']})")
    else:
        ca, cb = code["a"] or {}, code["b"] or {}
        con.print(f"code: @{ca.get('short', '-')} vs @{cb.get('short', '-')}"
                  + (f": {escape(code['diffstat'])}" if code["diffstat"] else ""))
        for f in code["files"]:
            con.print(f"  {escape(f)}")
        if code["note"]:
            con.print(f"[yellow]{escape(code['note'])}[/yellow]")
    for c in doc["commands"]:
        con.print(f"{c['stage']} command:\n  - {escape(c['a'])}\n  + {escape(c['b'])}")
    if not doc["commands"]:
        con.print("stage commands: the same")
    if code.get("patch"):
        con.print(code["patch"], markup=False, highlight=False, soft_wrap=True)


def render_chain(con: Console, doc: dict) -> None:
    """`opsdctl chain ID`: the stages, the score, the run's training and checks, the log's tail."""
    run = doc["run"]
    con.print(f"[bold]chain {doc['chain_id']}[/bold] {escape(doc['variant'])} seed {doc['seed']}: "
              f"{_state(doc['state'])}" + (f" [dim]({escape(doc['reason'])})[/dim]" if doc.get("reason") else ""))
    t = Table(show_edge=False, pad_edge=False)
    for col in ("stage", "state", "progress", "seconds", "GPUs", "peak MiB", "exit"):
        t.add_column(col)
    for st in doc.get("stages") or []:
        t.add_row(st["name"], _state(st["state"]), escape((st.get("progress") or {}).get("text") or "-"),
                  _num(st["seconds"], "{:.1f}"), escape(st.get("gpus") or "-"), _num(st.get("gpu_peak_mib"), "{:.0f}"),
                  "-" if st.get("exit_code") is None else str(st["exit_code"]))
    if doc.get("stages"):
        con.print(t)
    if doc.get("score") is not None:
        counts = " ".join(str(p["correct"]) for p in run["problems"] or [])
        con.print(f"score {doc['score']:.2f} (avg@{doc['k']} on {doc['n_problems']} problems)  per problem: {counts}")
    tr = run.get("train") or {}
    if tr:
        con.print(f"train: loss {_num(tr.get('final_loss'), '{:.4g}')}, KL {_num(tr.get('mean_kl'), '{:.4g}')}, "
                  f"clipped {_num(tr.get('frac_clipped'), '{:.3g}')}, {tr.get('steps') or '-'} steps")
    if run.get("recipe_check"):
        con.print(f"recipe check: {escape(str(run['recipe_check'].get('status')))}")
    code = run.get("code") or {}
    if code:
        con.print(f"code: {escape(code.get('kind') or '')} @{escape(code.get('short') or '')}")
    tail = doc.get("log_tail")
    if tail and tail["lines"]:
        con.print(f"[dim]-- {escape(tail['path'])} (last {len(tail['lines'])} lines) --[/dim]")
        con.print(escape("\n".join(tail["lines"])), highlight=False)
