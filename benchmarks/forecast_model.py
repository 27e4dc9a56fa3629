"""The forecast of the official score against simulated sessions the model did not generate.

    python benchmarks/forecast_model.py [--sessions 1000] [--seed 25]

Each session: a local baseline with 2 runs and 4 ideas with 2, 2, 1 and 1 runs, drawn from the
realistic mix (half null, a third harmful by 1-5 points, the rest helping by 1-4), true run sd
1.48 or 2.5, the user's setup offset 0, +1 or +2 points from the official one, the published
reference a 5-run mean of the official baseline. compare's own rules give the forecast
(opsdctl.stats.compare.build_report on the session's run records); the truth is each arm's
official 5-run mean, drawn fresh. Reports the 80% intervals' coverage, p_above_reference by decile
against what happened, and whether the submission (the highest forecast above the baseline's) is
worse than the baseline by more than a point. Writes benchmarks/results/forecast_model.{json,md}.
The whole-session benchmark through the worker loop is benchmarks/decision.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RUNS = (2, 2, 2, 1, 1)  # the baseline's local runs, then each idea's


def idea_effects(rng: np.random.Generator, n: int) -> np.ndarray:
    """The realistic mix: half null, a third harmful (-1 to -5), the rest helping (+1 to +4)."""
    u = rng.random(n)
    return np.where(u < 0.5, 0.0, np.where(u < 0.5 + 1 / 3, -rng.uniform(1, 5, n), rng.uniform(1, 4, n)))


def session(rng, sd: float, offset: float):
    from opsdctl.config import Reference
    from opsdctl.stats.compare import RunRecord, build_report

    official = 54.22
    theta = np.concatenate([[0.0], idea_effects(rng, len(RUNS) - 1)])
    ref = Reference(float(official + rng.normal(0, sd / np.sqrt(5))), 1.48, 5)
    runs, cid = [], 0
    for i, n in enumerate(RUNS):
        for y in official + offset + theta[i] + sd * rng.standard_normal(n):
            cid += 1
            runs.append(RunRecord("baseline" if i == 0 else f"idea{i}", cid, float(y), 12, 30, None, None, False))
    rep = build_report(runs, baseline="baseline", reference=ref)
    entries = {e["name"]: e for e in rep["variants"]}
    fc = [rep["baseline"]["forecast"]] + [entries[f"idea{i}"]["forecast"] for i in range(1, len(RUNS))]
    truth = official + theta + rng.standard_normal(len(RUNS)) * sd / np.sqrt(5)  # the 5 official re-trains
    return fc, truth, ref.mean, theta


def main(argv=None) -> int:
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    rows, probs, hits, sds = [], [], [], []
    for sd in (1.48, 2.5):
        for offset in (0.0, 1.0, 2.0):
            cover, worse, gain = [], [], []
            for _ in range(args.sessions):
                fc, truth, ref_mean, theta = session(rng, sd, offset)
                for f, y in zip(fc, truth):
                    cover.append(f["low80"] <= y <= f["high80"])
                    probs.append(f["p_above_reference"])
                    hits.append(y > ref_mean)
                    sds.append(sd)
                means = [f["mean"] for f in fc]
                pick = int(np.argmax(means))  # the baseline (index 0) when no idea is forecast above it
                worse.append(theta[pick] < -1.0)
                gain.append(theta[pick])
            rows.append({"sd": sd, "offset": offset, "coverage80": round(float(np.mean(cover)), 4),
                         "p_worse_by_1": round(float(np.mean(worse)), 4), "mean_gain": round(float(np.mean(gain)), 3)})
            print(rows[-1], flush=True)
    probs, hits, sds = np.array(probs), np.array(hits), np.array(sds)
    deciles = []
    for lo in np.arange(0.0, 1.0, 0.1):
        row = {"decile": f"{lo:.1f}-{lo + 0.1:.1f}"}
        for sd in (1.48, 2.5):
            sel = (sds == sd) & (probs >= lo) & (probs < lo + 0.1 if lo < 0.9 else probs <= 1.0)
            row[str(sd)] = {"n": int(sel.sum()), "mean_p": round(float(probs[sel].mean()), 4) if sel.any() else None,
                            "observed": round(float(hits[sel].mean()), 4) if sel.any() else None}
        deciles.append(row)
    doc = {"sessions_per_row": args.sessions, "seed": args.seed, "runs": RUNS, "rows": rows,
           "p_above_reference_deciles": deciles, "seconds": round(time.time() - t0, 1)}
    lines = [f"Forecast against simulated sessions ({args.sessions} a row, seed {args.seed}; baseline 2 local runs, "
             "ideas with 2, 2, 1, 1 runs from the realistic mix; truth: each arm's official 5-run mean):", "",
             "| true sd | setup offset | 80% interval covers | P(submission worse by > 1 point) | mean true gain of the submission |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['sd']} | +{r['offset']:g} | {100 * r['coverage80']:.1f}% | {100 * r['p_worse_by_1']:.1f}% | "
              f"{r['mean_gain']:+.2f} |" for r in rows]
    lines += ["", "| p_above_reference | sd 1.48: arms, mean p, observed | sd 2.5: arms, mean p, observed |",
              "|---|---|---|"]

    def cell(c):
        return "-" if not c["n"] else f"{c['n']}, {c['mean_p']:.3f}, {c['observed']:.3f}"

    lines += [f"| {d['decile']} | {cell(d['1.48'])} | {cell(d['2.5'])} |" for d in deciles]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "forecast_model.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / "forecast_model.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"{time.time() - t0:.0f}s; wrote {args.out / 'forecast_model.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
