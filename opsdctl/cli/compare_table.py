"""compare's table and notes in the terminal: opsdctl.stats.compare.build_report's Report, printed
with rich (the JSON twin is Report.to_json)."""

from __future__ import annotations

import math
from types import MappingProxyType

from opsdctl.cli.cells import num
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
    """What to run next for one candidate (with its time and fit when asked and known)."""
    if e.runs_needed is not None:
        text = f"+{e.runs_needed} run" + ("s" if e.runs_needed > 1 else "")
    elif e.runs_needed_worse is not None:
        text = f"+{e.runs_needed_worse} run" + ("s" if e.runs_needed_worse > 1 else "") + " (worse)"
    elif e.needs_baseline_runs:
        both = e.runs_needed_both_arms
        text = "baseline too" + (f": +{both} each" if both else ": out of reach")
    elif e.verdict in ("better", "worse"):
        return "settled"
    else:
        return "-"
    if with_time and e.minutes_needed is not None:
        text += f" ({_min(e.minutes_needed)}" + ("" if e.fits is None else
                                                    (", fits" if e.fits else ", does not fit")) + ")"
    return text


def _forecast_cells(f: rp.Forecast) -> list[str]:
    """'56.10 [54.02, 58.18]' and P(best), or dashes."""
    if f.mean is None:
        return ["-", "-"]
    return [f"{f.mean:.2f} [{f.low80:.2f}, {f.high80:.2f}]", f"{f.p_best:.2f}"]


def render_compare(report: rp.Report, console) -> None:
    """Print the report: the table (baseline on top, candidates by P(beat)), then the
    Bonferroni note, the noise line, the ranked next actions (report.advice, when the caller
    added `opsdctl advise`'s ranking), what a screen resolves, and partial runs apart."""
    from rich.markup import escape
    from rich.table import Table

    b, nz = report.baseline, report.noise
    full = [e for e in report.entries if not e.partial]
    part = report.partials

    if b.source == "runs":
        title = f"Against baseline {escape(b.name)} ({b.n} run{'s' if b.n != 1 else ''} in the store)"
    elif b.source == "runs+reference":
        ref = b.reference
        title = (f"Against baseline {escape(b.name)} ({b.n} run{'s' if b.n != 1 else ''} in the store, "
                 f"combined with the published {ref.mean:.2f}; setup offset sd {b.offset_sd:.3g})")
    elif b.source == "reference":
        title = f"Against the published reference {b.mean:.2f} (n = {b.n}; no store runs of the baseline)"
    else:
        title = "No baseline"
    paired = any(e.paired_se is not None for e in report.full)  # the column only when it has values
    t = Table(title=title, title_justify="left")
    cols = [
        ("variant", "left"), ("runs", "right"), ("mean", "right"), ("sd", "right"), ("delta", "right"),
        ("95% CI of delta", "center"), ("P(beat)", "right"), ("verdict", "left"), ("next", "left"),
        ("forecast [80%]", "center"), ("P(best)", "right"),
    ] + ([("by-problem SE", "right")] if paired else [])
    for col, justify in cols:
        t.add_column(col, justify=justify)
    blank = ["-"] * (len(cols) - 6)
    bname = escape(b.name or ("reference" if b.source == "reference" else ""))
    bname = bname if bname == "baseline" else f"{bname} (baseline)".strip()
    if b.source == "reference" and b.name:
        bname += " (reference)"
    t.add_row(bname, str(b.n), num(b.mean, PT), num(b.sd, PT), *blank[:5], *_forecast_cells(b.forecast),
              *blank[5:], style="bold")
    t.add_section()
    for e in full:
        if e.n == 0:
            t.add_row(escape(e.name), "0", *["-"] * 6, "no runs", "-", "-", *(["-"] if paired else []))
            continue
        ci = "-" if e.ci_low is None else f"[{e.ci_low:+.2f}, {e.ci_high:+.2f}]"
        v = e.verdict or "-"
        row = [
            escape(e.name), str(e.n), num(e.mean, PT), num(e.sd, PT), num(e.delta, "{:+.2f}"), ci,
            "-" if e.p_beat is None else f"{e.p_beat:.3f}",
            f"[{_VERDICT_STYLE.get(v, '')}]{v}[/]" if v in _VERDICT_STYLE else v,
            _next_cell(e, with_time=True),
            *_forecast_cells(e.forecast),
        ]
        if paired:
            row.append("-" if e.paired_se is None else f"±{e.paired_se:.2f}")
        t.add_row(*row)
    console.print(t)

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
