"""Does each part of the forecast pay? Its intervals with one part replaced at a time, on the world suite.

    python benchmarks/forecast_parts.py --sessions 80 --processes 1     # the committed table (tune seed)
    python benchmarks/forecast_parts.py --sessions 2 --worlds 2 --out /tmp/p   # a quick look

benchmarks/worlds.py's fixed-layout sessions (2+3x2, 2+6x1, 0+4x2; the adaptive layout is left out)
on the tune seed, the same sessions under each variant of opsdctl.stats.forecast:

  shipped            the forecast as it is
  normal family      the spike and slab replaced by one normal side (no null share, no sides' share),
                     moment-matched to the shipped prior's fresh idea; its scale k still learned
  sigma plugged in   the run variance's estimate s^2 used as if known (sigma_nodes' one-node path)
                     instead of integrated over SIGMA_NODES nodes
  arms on sigma 1/4  SIGMA_BY_ARMS 0.25: the arms' evidence on sigma's nodes tempered (the former default)
  arms on sigma 0    SIGMA_BY_ARMS 0.0: the arms say nothing on sigma
  helpful sd 0.87    the helpful side at the mix's own sd (U(1, 4)) instead of 2 (the former default)
  former             both former defaults: the forecast before they changed
  scale prior 1.0    the family's scale k with a log-normal prior of sd 1.0 instead of 0.5

Each variant is set by replacing forecast.posterior's defaults or forecast.sigma_nodes inside this
process only (forecast.py is unchanged; compare calls them through the module). The submission rule
reads the local means and the noise estimate, which no variant touches, so the submitted arm is the
same up to p_best ties. Per variant: the cells meeting both coverage goals (worlds.COVER_ARMS,
worlds.COVER_SUBMITTED), the worst cell each way, mean |coverage - 0.80| over cells with its
paired difference from the shipped forecast (a bootstrap over sessions: its standard error), and
the worst decile gap of p_above_reference (worlds.figures).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing import Pool
from pathlib import Path
from typing import Optional

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import worlds  # noqa: E402
from results_file import write_results  # noqa: E402

from opsdctl.stats import forecast  # noqa: E402

FIXED = tuple(k for k, v in worlds.LAYOUTS.items() if v is not None)
TARGET = 0.80  # the intervals' nominal coverage
BOOT = 400  # bootstrap resamples of the sessions for the paired standard errors
BOOT_SEED = 17


def normal_family() -> forecast.FamilyPrior:
    """One normal side with the mean and sd of a fresh idea under the shipped prior at its centres
    (the null spike included): the plain normal family, its scale still learned."""
    pi = forecast.NULL_SHARE
    sides = (forecast.HARMFUL, forecast.HELPFUL)
    mean = (1.0 - pi) * sum(s.share * s.mean for s in sides)
    second = (1.0 - pi) * sum(s.share * (s.sd**2 + s.mean**2) for s in sides)
    sd = math.sqrt(second - mean * mean)
    return forecast.FamilyPrior(null_share=0.0, null_strength=0.0, sides=(forecast.Side(1.0, mean, sd),),
                                side_strength=0.0)


FORMER_HELPFUL_SD = 3.0 / math.sqrt(12.0)  # the mix's own U(1, 4), the helpful side's sd until 2026-12-07


@dataclass(frozen=True)
class Variant:
    name: str
    what: str
    family: Optional[str] = None  # "normal": normal_family()
    plug_in: bool = False
    sigma_by_arms: Optional[float] = None
    scale_log_sd: Optional[float] = None  # the family's scale prior (FamilyPrior.scale_log_sd)
    helpful_sd: Optional[float] = None  # the helpful side's sd at scale 1 (forecast.HELPFUL.sd)


VARIANTS = (
    Variant("shipped", "the forecast as it is"),
    Variant("normal family", "one normal side, moment-matched, for the spike and slab", family="normal"),
    Variant("sigma plugged in", "s^2 as if known, for SIGMA_NODES nodes", plug_in=True),
    Variant("arms on sigma 1/4", "SIGMA_BY_ARMS 0.25 (the arms' evidence on sigma tempered; the former default)",
            sigma_by_arms=0.25),
    Variant("arms on sigma 0", "SIGMA_BY_ARMS 0.0 (the arms say nothing on sigma)", sigma_by_arms=0.0),
    Variant("helpful sd 0.87", "the helpful side N(2.5, 0.87^2), the mix's own U(1, 4) (the former default)",
            helpful_sd=FORMER_HELPFUL_SD),
    Variant("former", "helpful sd 0.87 and SIGMA_BY_ARMS 0.25: the forecast before both changes",
            helpful_sd=FORMER_HELPFUL_SD, sigma_by_arms=0.25),
    Variant("scale prior 1.0", "SCALE_PRIOR_LOG_SD 1.0 for 0.5 (the family's scale freer)", scale_log_sd=1.0),
)


@contextmanager
def applied(v: Variant):
    """forecast.posterior / forecast.sigma_nodes as the variant has them, restored on exit."""
    post, nodes = forecast.posterior, forecast.sigma_nodes
    kw = {}
    if v.family == "normal":
        kw["family"] = normal_family()
    if v.scale_log_sd is not None:
        kw["family"] = replace(kw.get("family", forecast.FamilyPrior()), scale_log_sd=v.scale_log_sd)
    if v.helpful_sd is not None:
        kw["family"] = replace(kw.get("family", forecast.FamilyPrior()),
                               sides=(forecast.HARMFUL, replace(forecast.HELPFUL, sd=v.helpful_sd)))
    if v.sigma_by_arms is not None:
        kw["sigma_by_arms"] = v.sigma_by_arms
    try:
        if kw:
            forecast.posterior = lambda *a, **k: post(*a, **{**kw, **k})
        if v.plug_in:  # the known-noise path: one node, the estimate itself
            forecast.sigma_nodes = lambda noise: (forecast.SigmaNode(noise, 1.0, 0.0),)
        yield
    finally:
        forecast.posterior, forecast.sigma_nodes = post, nodes


def _job(args) -> tuple:
    v, w, layout, seed, i = args
    with applied(VARIANTS[v]):
        row = worlds.fixed_session(worlds.ALL_WORLDS[w], layout, seed, i)
    return v, w, layout, i, row


def _covered(row: dict, submitted: bool) -> tuple[int, int]:
    arms = [a for a in row["arms"] if not submitted or a["name"] == row["picks"]["bet"]]
    return sum(a["low80"] <= a["official"] <= a["high80"] for a in arms), len(arms)


def _mean_dev(counts: np.ndarray, idx: list[np.ndarray]) -> float:
    """mean over cells of |coverage - TARGET|; counts (cells, sessions, 2): covered, arms; idx: each
    cell's session indices (a resample)."""
    devs = []
    for c, ix in enumerate(idx):
        k, n = counts[c, ix, 0].sum(), counts[c, ix, 1].sum()
        devs.append(abs(k / n - TARGET) if n else 0.0)
    return float(np.mean(devs))


def summary(cells: dict, rows: dict, names: list[str]) -> dict:
    """Per variant: the coverage goals' count, worst cells, mean |coverage - 0.8| (arms, submitted)
    with the paired bootstrap difference from the shipped forecast, the worst decile gap."""
    keys = list(cells[names[0]])
    sessions = len(rows[names[0]][keys[0]])
    rng = np.random.default_rng(BOOT_SEED)
    boots = [[rng.integers(0, len(rows[names[0]][k]), len(rows[names[0]][k])) for k in keys] for _ in range(BOOT)]
    full = [np.arange(len(rows[names[0]][k])) for k in keys]
    counts = {(n, sub): np.array([[_covered(r, sub) for r in rows[n][k]] for k in keys]) for n in names
              for sub in (False, True)}
    out = {}
    for n in names:
        f = cells[n]
        ok = [k for k in keys if f[k]["goals"]["cover_arms"] and f[k]["goals"]["cover_submitted"]]
        arms = {k: f[k]["cover_arms"] for k in keys}
        sub = {k: f[k]["cover_submitted"] for k in keys if f[k]["cover_submitted"] is not None}
        gaps = {k: f[k]["worst_decile_gap"] for k in keys if f[k]["worst_decile_gap"] is not None}
        lo, hi, slo = min(arms, key=arms.get), max(arms, key=arms.get), min(sub, key=sub.get)
        doc = {"cells_both_goals": len(ok), "cells": len(keys), "sessions_per_cell": sessions,
               "cover_arms_low": [lo, arms[lo]], "cover_arms_high": [hi, arms[hi]], "cover_submitted_low": [slo, sub[slo]],
               "worst_decile_gap": max(gaps.values(), default=None),
               "mean_decile_gap": round(float(np.mean(list(gaps.values()))), 4) if gaps else None}
        for sub_, tag in ((False, "arms"), (True, "submitted")):
            dev = _mean_dev(counts[(n, sub_)], full)
            doc[f"mean_abs_dev_{tag}"] = round(dev, 4)
            if n != names[0]:
                base = counts[(names[0], sub_)]
                d = [_mean_dev(counts[(n, sub_)], b) - _mean_dev(base, b) for b in boots]
                doc[f"diff_vs_shipped_{tag}"] = round(dev - _mean_dev(base, full), 4)
                doc[f"diff_se_{tag}"] = round(float(np.std(d, ddof=1)), 4)
        out[n] = doc
    return out


def _cell(key: str) -> str:
    return key.replace(" | ", ", ")  # a table's own separator


def _gap(s: dict) -> str:
    return "-" if s["worst_decile_gap"] is None else f"{s['worst_decile_gap']:.3f} ({s['mean_decile_gap']:.3f})"


def markdown(doc: dict) -> str:
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    lines = ["# Does each part of the forecast pay? (tune seed, fixed layouts)", "",
             f"Command: `{doc['command']}` ({doc['seconds']:.0f} s on {doc['processes']} process(es)). "
             f"{doc['sessions']} sessions per world x layout cell, the same sessions under every variant.", "",
             "Goals: 80% intervals cover 72-90% of arms and >= 70% of the submitted arm. Mean |cov - 80%|: "
             "over cells; the difference from the shipped forecast is paired (same sessions), its SE a bootstrap "
             "over sessions; negative is better than shipped.", "",
             "| variant | cells meeting both | arms: lowest cell | arms: highest cell | submitted: lowest cell "
             "| mean abs(cov - 80%) arms (vs shipped) | submitted (vs shipped) | worst decile gap (mean) |",
             "|---|---|---|---|---|---|---|---|"]
    for n, s in doc["summary"].items():
        vs = lambda t: "" if n == "shipped" else f" ({s[f'diff_vs_shipped_{t}']:+.4f} ± {s[f'diff_se_{t}']:.4f})"  # noqa: E731
        lines.append(f"| {n} | {s['cells_both_goals']} of {s['cells']} | {pct(s['cover_arms_low'][1])} ({_cell(s['cover_arms_low'][0])}) "
                     f"| {pct(s['cover_arms_high'][1])} ({_cell(s['cover_arms_high'][0])}) "
                     f"| {pct(s['cover_submitted_low'][1])} ({_cell(s['cover_submitted_low'][0])}) "
                     f"| {s['mean_abs_dev_arms']:.4f}{vs('arms')} | {s['mean_abs_dev_submitted']:.4f}{vs('submitted')} "
                     f"| {_gap(s)} |")
    names = list(doc["summary"])
    lines += ["", "Coverage of arms / of the submitted arm per cell:", "",
              "| cell | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in doc["cells"][names[0]]:
        lines.append(f"| {_cell(key)} | " + " | ".join(
            f"{pct(doc['cells'][n][key]['cover_arms'])} / {pct(doc['cells'][n][key]['cover_submitted'])}" for n in names) + " |")
    lines += ["", "Variants: " + "; ".join(f"{v['name']}: {v['what']}" for v in doc["variants"]) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=80, help="sessions per world and fixed layout")
    ap.add_argument("--worlds", type=int, nargs="*", default=None, help="world indices of worlds.WORLDS (default: all)")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--variants", nargs="*", default=None,
                    help="variant names to run beside 'shipped' (default: all): " + ", ".join(v.name for v in VARIANTS[1:]))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--name", default="forecast_parts", help="the results' file name (NAME.json, NAME.md)")
    args = ap.parse_args(argv)
    if args.sessions < 2:
        ap.error("--sessions: at least 2 (a standard error needs two sessions)")
    seed = worlds.SEEDS["tune"]  # never the held-out seed: this chooses what the forecast keeps
    ws = args.worlds if args.worlds is not None else list(range(len(worlds.WORLDS)))
    bad = [w for w in ws if not 0 <= w < len(worlds.WORLDS)]
    if bad:
        ap.error(f"--worlds: {bad} not in 0..{len(worlds.WORLDS) - 1} (the indices of worlds.WORLDS)")
    known = [v.name for v in VARIANTS]
    unknown = [n for n in args.variants or () if n not in known]
    if unknown:
        ap.error(f"--variants: {unknown} not among {known}")
    vs = [0] + [known.index(n) for n in args.variants if n != "shipped"] if args.variants is not None \
        else list(range(len(VARIANTS)))
    jobs = [(v, w, lay, seed, i) for v in vs for w in ws for lay in FIXED for i in range(args.sessions)]
    t0 = time.time()
    got: dict = {}
    run = map(_job, jobs) if args.processes == 1 else Pool(args.processes).imap_unordered(_job, jobs, chunksize=4)
    for n, (v, w, lay, i, row) in enumerate(run, 1):
        got.setdefault(VARIANTS[v].name, {}).setdefault(f"{worlds.ALL_WORLDS[w].name} | {lay}", {})[i] = row
        if n % 200 == 0 or n == len(jobs):
            print(f"forecast_parts: {n}/{len(jobs)} sessions, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    order = [f"{worlds.ALL_WORLDS[w].name} | {lay}" for w in ws for lay in FIXED]
    names = [VARIANTS[v].name for v in vs]
    rows = {n: {k: [got[n][k][i] for i in range(args.sessions)] for k in order} for n in names}
    cells = {n: {k: worlds.figures(rows[n][k]) for k in order} for n in names}
    keep = ("cover_arms", "cover_submitted", "cover_baseline", "worst_decile_gap", "decile_floor_median", "goals")
    cmd = "python benchmarks/forecast_parts.py" + f" --sessions {args.sessions} --processes {args.processes}" \
        + ("" if args.worlds is None else " --worlds " + " ".join(map(str, args.worlds))) \
        + ("" if args.variants is None else " --variants " + " ".join(f"'{n}'" for n in args.variants)) \
        + ("" if args.name == "forecast_parts" else f" --name {args.name}")
    doc = {"command": cmd, "split": "tune", "seed": seed, "sessions": args.sessions, "processes": args.processes,
           "seconds": round(time.time() - t0, 1),
           "variants": [{"name": VARIANTS[v].name, "what": VARIANTS[v].what} for v in vs],
           "normal_family": {"mean": round(normal_family().sides[0].mean, 4), "sd": round(normal_family().sides[0].sd, 4)},
           "summary": summary(cells, rows, names),
           "cells": {n: {k: {x: cells[n][k][x] for x in keep} for k in order} for n in names}}
    write_results(args.out, args.name, doc, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
