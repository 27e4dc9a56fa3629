"""`opsdctl compare`: candidates against the baseline and the run-to-run noise floor."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from opsdctl.cli.app import App
from opsdctl.cli.cells import num
from opsdctl.cli.console import console, escape, print_json

if TYPE_CHECKING:
    from rich.console import Console


def command(
    ctx: typer.Context,
    variants: Optional[List[str]] = typer.Argument(None, metavar="[VARIANT]...",
                                                   help="Variants to compare [default: every scored one]."),
    baseline: Optional[str] = typer.Option(None, "--baseline", "-b", help="Baseline variant [default: [baseline] variant]."),
    family: Optional[str] = typer.Option(None, "--family", metavar="SPEC",
                                         help='What the verdicts correct for: "all" (every candidate tried), '
                                              '"since:2025-06-01" or "a,b,c" [default: [compare] family].'),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (every statistic, and what to "
                                                       "submit now and run next)."),
    explain: bool = typer.Option(False, "--explain", help="Also print how the table is read: the noise, the verdict "
                                                          "rule, the forecast, the runs to settle each question, the "
                                                          "partial screens and the training statistics."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="PNG", help="Also draw the runs, means and 95% CIs to this PNG."),
    pool_code: bool = typer.Option(False, "--pool-code", help="Pool a variant's runs across code trees and stage commands "
                                                             "(by default each code state is its own candidate, e.g. "
                                                             "`token-clip @3f2a1c`)."),
) -> None:
    """What to submit now, what to run next, and the candidates against the baseline and the
    run-to-run noise floor.

    One shared run-to-run sigma pooled over every variant in the store (the published sd as a
    prior while the local scatter allows it), the published mean with a setup offset, t
    intervals, P(beat baseline), and verdicts valid under repeated looks and corrected over
    every candidate tried, with how many more runs would settle each question. Partial
    evaluations are listed apart: screening only, never pooled, never a verdict. A candidate is
    a variant on one code state (code tree and stage commands): runs on edited code are another
    candidate.
    """
    from opsdctl.cli.documents.compare import compare_document

    app = App.of(ctx)
    cfg = app.config()
    doc = compare_document(cfg, app.reader(cfg), variants, baseline, family=family, pool_code=pool_code,
                           training=as_json or explain)  # the first screen shows no training columns
    report = doc.report
    if plot is not None:
        from opsdctl.stats.plots import plot_compare

        plot_compare(report, plot)
    if as_json:
        print_json(doc.to_json())
        return
    from opsdctl.cli.compare_table import render_compare

    con = console()
    render_compare(report, con, explain=explain, submit=doc.submit)
    if explain:
        render_training(con, list(report.training or ()))
    if plot is not None:
        con.print(f"plot: {escape(str(plot))}")


def render_training(con: Console, rows: list[dict]) -> None:
    """compare's training columns: per candidate, the mean of its runs' training statistics
    (only the columns some run has)."""
    from rich.table import Table

    rows = [r for r in rows if r["runs"] or r.get("gpu_peak_mib") is not None]
    if not rows:
        return
    names = sorted({n for r in rows for n in r["metrics"]})
    cols = [("loss", lambda r: num(r["final_loss"], "{:.4g}")), ("KL", lambda r: num(r["mean_kl"], "{:.4g}")),
            ("clipped", lambda r: num(r["frac_clipped"], "{:.1%}"))]
    cols += [(n, lambda r, n=n: num(r["metrics"].get(n), "{:.4g}")) for n in names if n not in ("kl", "frac_clipped")]
    cols += [("step s", lambda r: num(r["step_seconds"], "{:.1f}")),
             ("GPU peak MiB", lambda r: num(r.get("gpu_peak_mib"), "{:.0f}")),
             ("GPU util", lambda r: num(r.get("gpu_util_pct"), "{:.0f}%"))]
    cols = [(c, f) for c, f in cols if any(f(r) != "-" for r in rows)]
    t = Table(title="Training (mean over each candidate's runs)", title_justify="left")
    for col in ["variant", "runs"] + [c for c, _ in cols]:
        t.add_column(col, justify="left" if col == "variant" else "right")
    for r in rows:
        name = escape(r["name"]) + (" [yellow](partial)[/yellow]" if r.get("partial") else "")
        t.add_row(name, str(r["runs"]), *[f(r) for _, f in cols])
    con.print(t)
