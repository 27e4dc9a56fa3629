"""compare in the terminal, the answer first: what to submit now (the submission rule's pick, as
`export-recipe --leader` makes it), what to run next (the top of `advise`'s ranking), then one
table that fits a 100-column terminal; the statistics behind it (noise, verdict rule, forecast
model, runs to settle, partial screens) only with `compare --explain`. The report is
opsdctl.stats.compare.build_report's; its JSON twin is Report.to_json."""

from __future__ import annotations

import math
from types import MappingProxyType

from opsdctl.cli.cells import num, settle_cell
from opsdctl.stats import inference
from opsdctl.stats import report as rp
from opsdctl.stats.compare import PARTIAL_LABEL

FORECAST_SD_MOVED = 0.05  # compare says so when the forecast's noise moved this far (relative) from s


def _forecast_sd(fm: rp.ForecastModel, s: float | None) -> str | None:
    """The forecast's run-to-run sd when the arms' means moved it FORECAST_SD_MOVED or more away
    from the verdicts' s."""
    if not s or fm.train_var is None:
        return None
    sd = math.sqrt(fm.train_var + (fm.eval_var or 0.0))
    if abs(sd / s - 1.0) < FORECAST_SD_MOVED:
        return None
    return (f"The forecast's run-to-run sd is {sd:.2f}, not s = {s:.2f}: it weighs the noise again by how the "
            "arms' means fall under the family (the verdicts keep s).")



PT = "{:.2f}"  # points
_VERDICT_STYLE = MappingProxyType({"better": "bold green", "worse": "red", "undecided": "yellow"})


def _min(minutes: float) -> str:
    """Minutes for humans: tiny-profile chains take seconds, real ones tens of minutes."""
    return f"{minutes * 60:.0f} s" if minutes < 1 else f"{minutes:.0f} min"


def _next_cell(e: rp.Entry, with_time: bool = False) -> str:
    """What to run next for one candidate, in full (cells.settle_cell), with its time and fit when
    asked and known."""
    text = settle_cell(e, long=True)
    if text in ("settled", "-"):
        return text
    if with_time and e.minutes_needed is not None:
        text += f" ({_min(e.minutes_needed)}" + ("" if e.fits is None else
                                                    (", fits" if e.fits else ", does not fit")) + ")"
    return text


def render_compare(report: rp.Report, console, explain: bool = False, submit=None) -> None:
    """Print the report: `submit` (opsdctl.plan.submission.Leader, when the caller picked it) and
    the top of report.advice as the first two lines, then the table (baseline on top, candidates
    by P(beat)); with `explain`, the notes behind it (render_notes), else one line saying where
    they are."""
    if submit is not None:
        console.print(submit_line(submit, report), highlight=False)
    if report.advice is not None:
        console.print(run_next_line(report), highlight=False)
    console.print(compare_table(report))
    if explain:
        render_notes(report, console)
        return
    hidden = len(report.partials)
    console.print("[dim]Noise, verdict rule, forecast, runs to settle"
                  + (f", {hidden} partial screen{'s' if hidden != 1 else ''}" if hidden else "")
                  + ": opsdctl compare --explain[/dim]")


def submit_line(leader, report: rp.Report) -> str:
    """'Submit now: token-clip, forecast 56.10 [54.02, 58.18], undecided': the submission rule's
    pick (`export-recipe --leader` writes it)."""
    from rich.markup import escape

    f = leader.forecast
    fc = "no forecast" if f.mean is None else f"forecast {f.mean:.2f} [{f.low80:.2f}, {f.high80:.2f}]"
    if leader.variant is None:  # no candidate's forecast is above the baseline's
        return f"[bold]Submit now:[/bold] the released recipe ({escape(leader.name)}), {fc} (export-recipe --leader)"
    verdict = f", {leader.verdict}" if leader.verdict else ""
    return f"[bold]Submit now:[/bold] [bold green]{escape(leader.name)}[/], {fc}{verdict} (export-recipe --leader)"


def run_next_line(report: rp.Report, width: int = 100) -> str:
    """'Run next: one more run of a: +0.08 expected official points, 48 min': the top of
    `opsdctl advise`'s ranking (report.advice), naming advise when the line has room in `width`."""
    from rich.markup import escape

    if not report.advice:
        return "[bold]Run next:[/bold] no ranking yet: no noise estimate (repeat a variant)"
    text = f"Run next: {report.advice[0].text()}"
    more = " (opsdctl advise ranks the rest)"
    return "[bold]Run next:[/bold]" + escape(text.removeprefix("Run next:") + (more if len(text + more) <= width else ""))


def _ci(lo, hi) -> str:
    return "" if lo is None else f" [{lo:+.1f}, {hi:+.1f}]"


def compare_table(report: rp.Report):
    """The table, one row a candidate, no line wrapped in 100 columns: mean, delta with its 95% CI,
    P(beat), verdict, the forecast official mean with its 80% interval, the runs to settle."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    b = report.baseline
    who = "the baseline" if b.name == "baseline" else f"the baseline {escape(b.name)}"  # not "baseline baseline"
    if b.source == "runs":
        title = f"Against {who} ({b.n} run{'s' if b.n != 1 else ''} in the store)"
    elif b.source == "runs+reference":
        title = (f"Against {who} ({b.n} run{'s' if b.n != 1 else ''} in the store "
                 f"+ the published {b.reference.mean:.2f})")
    elif b.source == "reference":
        title = f"Against the published reference {b.mean:.2f} (n = {b.n}; no store runs of the baseline)"
    else:
        title = "No baseline"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=0)  # the box's blank separator is the one space between columns
    for col, justify in (("candidate", "left"), ("runs", "right"), ("mean", "right"), ("delta [95% CI]", "right"),
                         ("P(beat)", "right"), ("verdict", "left"), ("forecast [80%]", "right"),
                         ("to settle", "left")):
        t.add_column(col, justify=justify, no_wrap=True, overflow="ellipsis" if col == "candidate" else "fold")
    bname = escape(b.name or ("reference" if b.source == "reference" else ""))
    bname = bname if bname == "baseline" else f"{bname} (baseline)".strip()
    if b.source == "reference" and b.name:
        bname += " (reference)"
    t.add_row(bname, str(b.n), num(b.mean, PT), "-", "-", "-", _forecast_cell(b.forecast), "-", style="bold")
    for e in (e for e in report.entries if not e.partial):  # the full candidates, and those with no runs
        if e.n == 0:
            t.add_row(escape(e.name), "0", "-", "-", "-", "no runs", _forecast_cell(e.forecast), "-")
            continue
        v = e.verdict or "-"
        t.add_row(escape(e.name), str(e.n), num(e.mean, PT), num(e.delta, "{:+.2f}") + _ci(e.ci_low, e.ci_high),
                  "-" if e.p_beat is None else f"{e.p_beat:.3f}",
                  f"[{_VERDICT_STYLE.get(v, '')}]{v}[/]" if v in _VERDICT_STYLE else v,
                  _forecast_cell(e.forecast), settle_cell(e))
    return t


def _forecast_cell(f: rp.Forecast) -> str:
    """'56.10 [54.0, 58.2]' (the official mean and its 80% interval) or '-'."""
    return "-" if f.mean is None else f"{f.mean:.2f} [{f.low80:.1f}, {f.high80:.1f}]"


def render_notes(report: rp.Report, console) -> None:
    """`compare --explain`: how the table is read. Each candidate's sd, runs to settle in full (with
    minutes and fit), P(best) and by-problem SE; the forecast model, the verdict rule, the noise,
    the next actions, what a screen resolves, the notes; the partial screens apart."""
    from rich.markup import escape
    from rich.table import Table

    b, nz = report.baseline, report.noise
    part = report.partials
    paired = any(e.paired_se is not None for e in report.full)
    if b.source == "runs+reference":
        console.print(f"Baseline: {b.n} run{'s' if b.n != 1 else ''} in the store combined with the published "
                      f"{b.reference.mean:.2f}; setup offset sd {b.offset_sd:.3g}; sd {num(b.sd, PT)}; "
                      f"P(best) {num(b.forecast.p_best, '{:.2f}')}.")
    for e in report.full:
        if e.n == 0:
            continue
        bits = [f"sd {num(e.sd, PT)}", f"to settle: {_next_cell(e, with_time=True)}",
                f"P(best) {num(e.forecast.p_best, '{:.2f}')}"]
        if paired:
            bits.append("by-problem SE " + ("-" if e.paired_se is None else f"±{e.paired_se:.2f}"))
        console.print(f"  {escape(e.name)}: " + "; ".join(bits) + ".", highlight=False)
    fm = report.forecast_model
    if fm:
        console.print(
            f"Forecast (the bet): each arm's official {fm.official_runs}-run mean, from the local runs, the published "
            f"reference and the family's spread (sd ~ {fm.spread:.1f} points; prior centre {fm.spread_prior:g}); "
            "P(best) = chance it is the highest official mean. The verdicts below are the claim.")
        moved = _forecast_sd(fm, report.noise.s)
        if moved:
            console.print(moved)
    bon = report.spending
    if bon.m:
        lk = bon.looks
        console.print(
            f"Verdicts: one-sided, Bonferroni over the m = {bon.m} candidate{'s' if bon.m != 1 else ''} tried, "
            f"alpha spent over the looks (valid when compare is re-run after every run): better if P(beat) >= "
            f"{bon.better_at:.4g} (worse if <= {bon.worse_at:.4g}) at {lk.j_min}-{lk.j_flat} local runs in "
            f"the comparison, stricter beyond; none before {lk.j_min} local runs and {lk.min_local_dof} repeat dof."
        )
    if nz.s is None:
        console.print(
            f"[bold red]Noise: {inference.NOT_ENOUGH_RUNS}[/] (no prior and only single runs): no P(beat) or "
            "verdicts. Repeat a variant, or give \\[baseline] reference = {mean, sd, n}."
        )
    else:
        pc = nz.prior_check
        if nz.nu0:
            prior = f"prior s0 = {nz.s0:.2f} with {nz.nu0:.3g} dof from the reference, " + (
                f"weight {pc.weight:.0%}: local s = {nz.s_local:.2f} (nu = {nz.nu_local}), p = {pc.p:.2f}"
                if pc is not None and pc.checked
                else "not yet checked: no repeated runs")
        elif nz.s0 is not None:
            prior = "prior weight 0 (see the note)"
        else:
            prior = "no prior"
        line = f"Noise: s = {nz.s:.2f} points per run (nu = {nz.nu:.3g}; {prior})."
        if nz.v_eval is not None:
            line += (
                f" Split: training tau^2 = {nz.tau2:.2f} vs eval sampling mean V_r = {nz.v_eval:.2f} "
                f"points^2 (V_r from {nz.runs_with_counts} run{'s' if nz.runs_with_counts != 1 else ''}"
                + (f"; {nz.runs_without_counts} without per-problem counts left out" if nz.runs_without_counts
                   else "") + ")."
            )
        else:
            line += " No per-problem counts: no split into training and eval-sampling noise."
        console.print(line)
        if nz.advice:
            console.print(f"[cyan]Advice: {nz.advice}.[/]")

    bud = report.budget
    advice = report.advice
    if advice:
        top = []
        for a in advice:
            if a.action.value == "stop" or len(top) == 3:  # opsdctl.plan.advise.Advice
                break
            top.append(a.text())
        left = "" if bud.minutes_left is None else f" with {bud.minutes_left:.0f} min left"
        console.print(f"Next (`opsdctl advise`, expected gain of the submission's official score{left}): "
                      + ("; ".join(escape(t) for t in top) if top else
                         "stop: nothing left is worth its minutes; submit the best forecast") + ".")
    sc = report.screen
    if sc is not None:
        console.print(f"A {sc.problems}x{sc.k} screen read against the baseline's partial on the same problems: "
                      f"SE {sc.se:.2f} points, so it resolves effects of about {sc.resolves:.1f} points "
                      "(one-sided 5%, 80% power).")
    if paired:
        console.print(
            "by-problem SE: paired over problems on run-averaged p_i; uncertainty about generalizing "
            "beyond these problems, not run-to-run noise."
        )
    for n in report.notes:
        console.print(f"Note: {escape(n)}.")

    if part:
        console.print(f"Partial evaluations ({PARTIAL_LABEL}): fewer problems or samples than the full setting; "
                      "never pooled, never a verdict. SE: training noise plus their own eval sampling.")
        pt = Table()
        for col in ("variant", "problems x k", "runs", "mean", "SE", "eval SE", "vs baseline partial", "P(effect > 0)", ""):
            pt.add_column(col, justify="left" if col in ("variant", "") else "right")
        for e in part:
            vb = e.vs_baseline
            pt.add_row(escape(e.name), f"{e.n_problems} x {e.k}", str(e.n), num(e.mean, PT), num(e.se, PT),
                       num(e.se_eval, PT),
                       "-" if vb is None else f"{vb.delta:+.2f} ± {vb.se:.2f} ({vb.baseline_runs} run"
                                              + ("s" if vb.baseline_runs != 1 else "") + ")",
                       "-" if vb is None else f"{vb.p_effect:.2f}", PARTIAL_LABEL)
        console.print(pt)
