"""Server-rendered SVG for the dashboard: interval bars, line charts, a stage timeline, per-problem
strips. Pure functions of numbers to markup (nothing is fetched or run in the browser); every text
that comes from the store is escaped."""

from __future__ import annotations

import math
from html import escape
from typing import Optional, Sequence

from markupsafe import Markup

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
STATE_COLOURS = {"succeeded": "#2ca02c", "failed": "#d62728", "running": "#1f77b4", "cancelled": "#7f7f7f",
                 "interrupted": "#ff7f0e", "stopped": "#9467bd", "queued": "#bbbbbb"}


def _x(value: float, lo: float, hi: float, width: float) -> float:
    return 0.0 if hi <= lo else (value - lo) / (hi - lo) * width


def interval_bar(low: Optional[float], high: Optional[float], point: Optional[float], lo: float, hi: float,
                 width: int = 220, height: int = 16, colour: str = "#1f77b4") -> Markup:
    """A 95% interval as a bar on a shared axis [lo, hi], the estimate as a tick, 0 as a line."""
    parts = [f'<svg class="ci" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    if lo < 0 < hi:
        z = _x(0.0, lo, hi, width)
        parts.append(f'<line x1="{z:.1f}" x2="{z:.1f}" y1="0" y2="{height}" stroke="#888" stroke-dasharray="2,2"/>')
    if low is not None and high is not None:
        a, b = _x(max(low, lo), lo, hi, width), _x(min(high, hi), lo, hi, width)
        parts.append(f'<rect x="{a:.1f}" y="{height * 0.3:.1f}" width="{max(b - a, 1):.1f}" height="{height * 0.4:.1f}" '
                     f'fill="{colour}" fill-opacity="0.45"><title>[{low:+.2f}, {high:+.2f}]</title></rect>')
    if point is not None:
        p = _x(min(max(point, lo), hi), lo, hi, width)
        parts.append(f'<line x1="{p:.1f}" x2="{p:.1f}" y1="1" y2="{height - 1}" stroke="{colour}" stroke-width="2"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def axis_range(values: Sequence[Optional[float]], pad: float = 0.1) -> tuple[float, float]:
    """A shared axis around the values and 0."""
    vals = [v for v in values if v is not None and math.isfinite(v)] + [0.0]
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    return lo - pad * span, hi + pad * span


def line_chart(series: dict[str, list[tuple[float, float]]], title: str, width: int = 320, height: int = 160) -> Markup:
    """One panel of curves (x = step) with its title, y range and a legend."""
    pts = [(x, y) for s in series.values() for x, y in s if y is not None and math.isfinite(y)]
    if not pts:
        return Markup("")
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y1 == y0:
        y0, y1 = y0 - 1e-9 - abs(y0) * 0.05, y1 + 1e-9 + abs(y1) * 0.05
    top, bottom, left = 18, height - 14, 4
    h = bottom - top
    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">',
           f'<text x="{left}" y="12" class="t">{escape(title)}</text>',
           f'<text x="{width - 4}" y="12" text-anchor="end" class="s">{y1:.3g}</text>',
           f'<text x="{width - 4}" y="{height - 2}" text-anchor="end" class="s">{y0:.3g}</text>',
           f'<rect x="{left}" y="{top}" width="{width - 2 * left}" height="{h}" fill="none" stroke="#ddd"/>']
    for i, (name, s) in enumerate(series.items()):
        good = [(x, y) for x, y in s if y is not None and math.isfinite(y)]
        if not good:
            continue
        xy = " ".join(f"{left + _x(x, x0, x1, width - 2 * left):.1f},{bottom - _x(y, y0, y1, h):.1f}" for x, y in good)
        colour = PALETTE[i % len(PALETTE)]
        out.append(f'<polyline points="{xy}" fill="none" stroke="{colour}" stroke-width="1.5">'
                   f'<title>{escape(name)}</title></polyline>')
    out.append("</svg>")
    return Markup("".join(out))


def curve_panels(runs: Sequence[dict], keys: Sequence[str]) -> list[Markup]:
    """A panel per curve key (loss, kl, ...) with one line per run that logged it."""
    panels = []
    for key in keys:
        series = {}
        for run in runs:
            curve = (run.get("train") or {}).get("curve") or []
            pts = [(float(p["step"]), float(p[key])) for p in curve
                   if isinstance(p.get(key), (int, float)) and isinstance(p.get("step"), (int, float))]
            if pts:
                series[f"chain {run['chain_id']}"] = pts
        if series:
            panels.append(line_chart(series, key))
    return panels


def curve_keys(runs: Sequence[dict]) -> list[str]:
    """The curve keys the runs logged: the usual ones first, then the user's metrics."""
    usual = ["loss", "kl", "mean_kl", "frac_clipped", "learning_rate", "grad_norm"]
    seen: list[str] = []
    for run in runs:
        for p in (run.get("train") or {}).get("curve") or []:
            for k, v in p.items():
                if k != "step" and isinstance(v, (int, float)) and k not in seen:
                    seen.append(k)
    return [k for k in usual if k in seen] + [k for k in seen if k not in usual]


def problem_strip(problems: Optional[Sequence[dict]], cell: int = 9) -> Markup:
    """Per-problem counts: one cell per problem, darker = more samples correct."""
    if not problems:
        return Markup("")
    width = cell * len(problems)
    out = [f'<svg class="strip" width="{width}" height="{cell + 2}" viewBox="0 0 {width} {cell + 2}" role="img">']
    for i, p in enumerate(problems):
        frac = (p.get("correct") or 0) / p["samples"] if p.get("samples") else 0.0
        out.append(f'<rect x="{i * cell}" y="1" width="{cell - 1}" height="{cell}" fill="#2ca02c" '
                   f'fill-opacity="{0.08 + 0.92 * frac:.2f}"><title>{escape(str(p.get("id")))}: '
                   f'{p.get("correct")}/{p.get("samples")}</title></rect>')
    out.append("</svg>")
    return Markup("".join(out))


def timeline(lanes: dict[str, list[dict]], t0: float, t1: float, width: int = 900, lane_h: int = 22) -> Markup:
    """Stages as bars per GPU lane; each item {"start", "end" (epoch s), "label", "state"}."""
    if not lanes or t1 <= t0:
        return Markup("")
    label_w = 70
    height = lane_h * len(lanes) + 16
    span = width - label_w - 4
    out = [f'<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for row, (lane, items) in enumerate(lanes.items()):
        y = row * lane_h
        out.append(f'<text x="0" y="{y + 15}" class="s">{escape(lane)}</text>')
        for it in items:
            a = label_w + _x(it["start"], t0, t1, span)
            b = label_w + _x(it["end"], t0, t1, span)
            colour = STATE_COLOURS.get(it.get("state"), "#999")
            out.append(f'<rect x="{a:.1f}" y="{y + 3}" width="{max(b - a, 1.5):.1f}" height="{lane_h - 6}" fill="{colour}" '
                       f'fill-opacity="0.75"><title>{escape(it["label"])}</title></rect>')
    minutes = (t1 - t0) / 60.0
    out.append(f'<text x="{label_w}" y="{height - 2}" class="s">-{minutes:.0f} min</text>'
               f'<text x="{width - 4}" y="{height - 2}" text-anchor="end" class="s">now</text></svg>')
    return Markup("".join(out))
