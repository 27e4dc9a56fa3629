"""`opsdctl show VARIANT --plot PATH`: the training curves of a variant's runs in one PNG.

One panel per quantity the curves hold (loss, KL, fraction clipped, learning rate, then the
user's `[stages.train.metrics]` names), steps on x, one line per run; the baseline's runs drawn
thin and grey behind, when given, so a method's effect on training shows beside its score.
matplotlib is imported inside the function and draws on the Agg canvas (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

ORDER = ("loss", "kl", "frac_clipped", "learning_rate")
TITLES = {"loss": "loss", "kl": "KL (teacher || student)", "frac_clipped": "fraction clipped",
          "learning_rate": "learning rate"}
MAX_PANELS = 8


def _series(run: dict, key: str) -> tuple[list[int], list[float]]:
    pts = [p for p in ((run.get("train") or {}).get("curve") or []) if isinstance(p.get("step"), int) and key in p]
    return [p["step"] for p in pts], [float(p[key]) for p in pts]


def plot_training(doc: dict, path: str | Path, baseline: Optional[dict] = None) -> Optional[Path]:
    """Write the curves of a `show_doc` (and, greyed, a baseline's) to `path`; None when no run
    has a curve with steps."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    runs = [r for r in doc["runs"] if (r.get("train") or {}).get("curve")]
    base_runs = [r for r in (baseline or {}).get("runs", []) if (r.get("train") or {}).get("curve")]
    keys = {k for r in runs for p in r["train"]["curve"] for k in p if k != "step" and isinstance(p[k], (int, float))}
    keys = [k for k in ORDER if k in keys] + sorted(keys - set(ORDER))
    keys = [k for k in keys if any(_series(r, k)[0] for r in runs)][:MAX_PANELS]
    if not keys:
        return None
    ncol = 2 if len(keys) > 1 else 1
    nrow = (len(keys) + ncol - 1) // ncol
    fig = Figure(figsize=(5.2 * ncol, 2.9 * nrow + 0.6), dpi=120)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    for ax, key in zip(axes, keys):
        for r in base_runs:
            x, y = _series(r, key)
            if x:
                ax.plot(x, y, color="#9a9a9a", lw=0.9, alpha=0.8, zorder=1)
        for i, r in enumerate(runs):
            x, y = _series(r, key)
            if x:
                ax.plot(x, y, color=colors[i % len(colors)], lw=1.5, marker="o" if len(x) <= 12 else None, ms=3,
                        label=f"chain {r['chain_id']} (seed {r['seed']})", zorder=2)
        ax.set_title(TITLES.get(key, key), fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if key == "learning_rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    if base_runs:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="#9a9a9a", lw=0.9))
        name = baseline["variant"] if "baseline" in baseline["variant"] else f"{baseline['variant']} (baseline)"
        labels.append(f"{name}, {len(base_runs)} run{'s' if len(base_runs) != 1 else ''}")
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(f"training curves: {doc['variant']} ({len(runs)} run{'s' if len(runs) != 1 else ''})", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
