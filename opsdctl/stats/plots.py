"""`opsdctl compare --plot PATH`: one PNG of the comparison report.

Each variant's run scores as dots, its mean with the 95% CI of the mean (pooled s, t(nu)),
and the baseline's mean and 95% band across the whole width. Partial evaluations are left
out (other problems/samples: not comparable). matplotlib is imported inside the function and
draws on the Agg canvas, so importing opsdctl stays fast and works without a display.
"""

from __future__ import annotations

from pathlib import Path

from opsdctl.stats.inference import NOT_ENOUGH_RUNS

_VERDICT_COLOR = {"better": "#1a9850", "worse": "#d73027", "undecided": "#4f6d8f", None: "#4f6d8f"}
_BASE_COLOR = "#7f7f7f"


def _p(p: float) -> str:
    """P(beat) to three places, without rounding to a certain-looking 1.000 or 0.000."""
    return ">0.999" if p > 0.999 else "<0.001" if p < 0.001 else f"{p:.3f}"


def plot_compare(report, path: str | Path, title: str | None = None) -> Path:
    """Write the comparison plot of a compare report (opsdctl.stats.report.Report) to `path` (PNG) and return the path."""
    # Figure + the Agg canvas directly: no pyplot global state, no display, no backend switch.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    b, nz = report.baseline, report.noise
    cands = [e for e in report.entries if not e.partial and e.n]
    cols = ([b] if b.runs else []) + cands  # the baseline gets its own column when it has runs
    labels = [e.name if e is not b or "baseline" in e.name else f"{e.name}\n(baseline)" for e in cols]

    # wide enough for the labels, capped so a long comparison stays a readable picture
    fig = Figure(figsize=(min(11.0, max(5.5, 1.3 * len(cols) + 2.5)), 4.8), dpi=130)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    handles = []
    if b.mean is not None:
        lo, hi = b.mean_ci_low, b.mean_ci_high
        if lo is not None:
            ax.axhspan(lo, hi, color=_BASE_COLOR, alpha=0.18, lw=0, zorder=0)
        ax.axhline(b.mean, color=_BASE_COLOR, lw=1.2, ls="--", zorder=1)
        src = "reference" if b.source == "reference" else "baseline"
        if lo is not None:
            handles.append(Patch(facecolor=_BASE_COLOR, alpha=0.3, edgecolor=_BASE_COLOR, ls="--",
                                 label=f"{src} mean {b.mean:.2f}, 95% CI"))
        else:
            handles.append(Line2D([], [], color=_BASE_COLOR, ls="--", label=f"{src} mean {b.mean:.2f}"))

    ys_all = [b.mean] if b.mean is not None else []
    for x, e in enumerate(cols):
        color = _BASE_COLOR if e is b else _VERDICT_COLOR.get(e.verdict, _VERDICT_COLOR[None])
        runs = [y for y in e.runs if y is not None]
        n = len(runs)
        # spread the dots sideways, deterministic, so equal scores stay visible
        offs = [0.0] if n == 1 else [-0.12 + 0.24 * i / (n - 1) for i in range(n)]
        ax.scatter([x - 0.14 + o * 0.6 for o in offs], runs, s=22, color=color, alpha=0.75,
                   edgecolor="white", linewidth=0.5, zorder=3)
        mean, lo, hi = e.mean, e.mean_ci_low, e.mean_ci_high
        if lo is not None:
            ax.errorbar([x + 0.08], [mean], yerr=[[mean - lo], [hi - mean]], fmt="o", color=color,
                        ms=7, capsize=5, lw=1.8, zorder=4)
        else:
            ax.plot([x + 0.08], [mean], "o", color=color, ms=7, zorder=4)
        ys_all += runs + [v for v in (mean, lo, hi) if v is not None]
        if e is not b:
            p = e.p_beat
            lines = [f"{e.delta:+.2f}"] if e.delta is not None else []
            if p is not None:
                lines += [f"P(beat) {_p(p)}", e.verdict or ""]
            txt = "\n".join(lines)
            top = max(v for v in (hi, mean, *runs) if v is not None)
            # on a white ground: a losing candidate's label can sit on the baseline's dashed line
            ax.annotate(txt, (x, top), xytext=(0, 8), textcoords="offset points", zorder=5,
                        ha="center", va="bottom", fontsize=8 if len(cols) <= 8 else 7, color=color,
                        bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85))

    crowded = len(cols) > 6 or (len(cols) > 3 and max(len(x) for x in labels) > 16)
    ax.set_xticks(range(len(cols)), labels, fontsize=9, rotation=25 if crowded else 0,
                  ha="right" if crowded else "center", rotation_mode="anchor")
    ax.set_xlim(-0.6, len(cols) - 0.4)
    if ys_all:
        lo_y, hi_y = min(ys_all), max(ys_all)
        bottom = lo_y - max(1.0, 0.08 * (hi_y - lo_y))
        ax.set_ylim(bottom, bottom + (hi_y - bottom) / 0.68)  # top third: annotations and legend
    ax.set_ylabel("score (avg@k, points)")
    ax.grid(axis="y", color="#dddddd", lw=0.6, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles += [
        Line2D([], [], ls="", marker="o", ms=5, color="#555555", alpha=0.75, label="one run"),
        Line2D([], [], ls="-", marker="o", ms=6, color="#555555",
               label="mean, 95% CI" if nz.s is not None else "mean"),
    ]
    ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=False, ncol=len(handles))
    m = report.spending.m
    sub = (f"pooled s = {nz.s:.2f} points per run (nu = {nz.nu})" if nz.s is not None
           else f"{NOT_ENOUGH_RUNS}: no intervals")
    if m and nz.s is not None:
        sub += f"; verdicts over the {m} candidate{'s' if m != 1 else ''} tried, valid under repeated looks"
    ax.set_title(title or "Candidates against the baseline", fontsize=11, loc="left", pad=16)
    ax.text(0.0, 1.012, sub, transform=ax.transAxes, ha="left", va="bottom", fontsize=8, color="#555555")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png")
    return path
