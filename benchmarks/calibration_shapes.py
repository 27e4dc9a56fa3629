"""Which misfit costs the forecast its calibration: the family's shape, or the published sd.

    python benchmarks/decision.py --rows /tmp/decision_rows.jsonl     # the sessions (about 6 min)
    python benchmarks/calibration_shapes.py /tmp/decision_rows.jsonl  # seconds

For every arm of every session decision.py ran, the exact posterior of P(official 5-run mean above
the published mean) when the local baseline level is known (as decision.py's oracle knows it), under
three families of effects, each with the session's true sd and with the published 1.48:

  mix          the benchmark's own: half null, a third U(-5, -1), a sixth U(+1, +4)
  two normals  half null, a third N(-3, 1.15^2), a sixth N(+2.5, 0.87^2): each side's mean and sd
  one normal   half null, the rest N(-1.2, 2.8^2): the mix's non-null half as one normal (the
               forecast's slab until it took two sides, at its prior centre)

And one more: the mix with the sd not known but integrated: sigma^2 under the published sd's scaled
inverse chi^2 on 4 dof and the session's within-arm scatter, weighed (fully: here the family is the
true one) by how well it explains every arm's mean under the mix (the level still known).

And the forecast itself built again from each session's inputs (what compare was given: the runs,
the noise estimate, the published reference), level estimated as compare does, under what the
session cannot know: the true sd (its run variance at the world's sigma, no dof), the family's
hyperparameters fixed at the mix (null share, sides' share, scale: none learned), and both; and under
a choice the model makes: the power at which the arms' means weigh sigma's nodes (forecast's
SIGMA_BY_ARMS, 1/4) set to 1 (the full posterior) and to 0 (the cut), beside the same forecast
with nothing changed.

Reports the worst decile gap of each, and of the forecast's own p_above_reference (what compare
printed in those sessions), over all arms and each sd apart, next to the sampling floor (what
exactly right probabilities would show on the same arms); and for each forecast the regret of the
submission export-recipe --leader's rule picks from it, on the same sessions. Writes
benchmarks/results/calibration_shapes.{json,md} (or --out DIR).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import decision  # noqa: E402

NULL_SHARE = decision.NULL
ONE_NORMAL = (1.0 - NULL_SHARE, -1.2, 2.8)  # the non-null half's mean -1.17 and sd 2.8, as one normal

PUBLISHED_SD = 1.48
GRID = np.linspace(-14.0, 14.0, 1401)


def normal_slab(parts) -> tuple[np.ndarray, np.ndarray]:
    """(grid, mass) of a sum of normals, each (share, mean, sd)."""
    dx = GRID[1] - GRID[0]
    mass = sum(share * norm.pdf(GRID, m, s) * dx for share, m, s in parts)
    return GRID, mass


FAMILIES = {
    "mix": decision.MIX_SLAB,
    "two normals": normal_slab([(1 / 3, -3.0, 4 / math.sqrt(12)), (1 / 6, 2.5, 3 / math.sqrt(12))]),
    "one normal": normal_slab([ONE_NORMAL]),
}


def arms_of(rows: list[dict]) -> list[dict]:
    """Every arm with its session's sd, level, the forecast's own p_above_reference and whether its
    official mean came out above."""
    return [{"sigma": r["sigma"], "level": r["level"], "runs": a["runs"], "above": a["above"],
             "forecast": a.get("p_above"), "baseline": a["name"] == "baseline"} for r in rows for a in r["arms"]]


def _judged(scored: list[dict], regrets: list[tuple[float, float]] = ()) -> dict:
    """Worst decile gap and sampling floor over all arms and each sd apart, and the mean regret of
    the sessions' picks, `regrets` as (the session's sd, its regret) (None without)."""
    by = {"all": (scored, list(regrets))}
    for sd in decision.SIGMAS:
        by[f"sd {sd:g}"] = ([x for x in scored if x["sigma"] == sd], [r for r in regrets if r[0] == sd])
    return {k: {"worst_gap": decision._worst_gap(decision._deciles(xs)),
                "floor_median": decision.calibration_floor([x["p_above"] for x in xs])["median"],
                "regret": round(float(np.mean([r for _, r in rs])), 4) if rs else None}
            for k, (xs, rs) in by.items()}


def p_above(arm: dict, slab, sd: float) -> float:
    if arm["baseline"] or not arm["runs"]:
        return 0.5  # the baseline: its official mean minus the published one is N(0, 2 sd^2 / 5)
    return decision._bayes(arm["runs"], arm["level"], sd, slab=slab, null=NULL_SHARE)[1]


PUBLISHED_DOF = 4  # the published sd is a 5-run estimate
SIGMA_GRID = np.exp(np.linspace(math.log(0.5), math.log(8.0), 121))


def sigma_integrated(row: dict, slab=decision.MIX_SLAB) -> list[dict]:
    """Every arm of one session with P(above) under the mix, sigma integrated: its prior the
    published sd on PUBLISHED_DOF dof (a scaled inverse chi^2), times the within-arm scatter's
    likelihood and each arm's mean's marginal under the mix and the known level."""
    s = SIGMA_GRID
    log_w = -(PUBLISHED_DOF + 1) * np.log(s) - PUBLISHED_DOF * PUBLISHED_SD**2 / (2 * s**2) + np.log(np.gradient(s))
    per = []
    for a in row["arms"]:
        if a["name"] == "baseline" or not a["runs"]:
            continue
        ys = np.asarray(a["runs"], dtype=float)
        density, _, above = decision.mix_terms(ys, row["level"], s, slab, NULL_SHARE)
        scatter = -(ys.size - 1) * np.log(s) - ((ys - ys.mean()) ** 2).sum() / (2 * s**2)
        log_w += np.log(density + 1e-300) + scatter
        per.append((a, above))
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    out = [{"p_above": float(w @ above), "above": a["above"], "sigma": row["sigma"]} for a, above in per]
    return out + [{"p_above": 0.5, "above": a["above"], "sigma": row["sigma"]}
                  for a in row["arms"] if a["name"] == "baseline" or not a["runs"]]


AGAIN = {  # the forecast built again: (the true sd known, the family's hyperparameters fixed, the arms' power on sigma)
    "the forecast again, nothing changed": (False, False, None),
    "the forecast again, the arms' means weigh sigma fully (power 1)": (False, False, 1.0),
    "the forecast again, the arms' means do not weigh sigma (power 0, the cut)": (False, False, 0.0),
    "the forecast again, the true sd known": (True, False, None),
    "the forecast again, the family's hyperparameters fixed at the mix": (False, True, None),
    "the forecast again, both": (True, True, None),
}


def forecast_again(row: dict, true_sd: bool, fixed_family: bool, power: float | None = None) -> tuple[list[dict], tuple | None]:
    """Every arm of one session with p_above_reference from the forecast built again from the
    session's inputs (decision.py's rows), the true sd and/or the fixed family swapped in, or
    the arms' evidence on sigma's nodes taken at another `power` (forecast.posterior's sigma_by_arms;
    None: its default).
    With them the session's (sd, regret): what export-recipe --leader's rule (the highest forecast
    mean; the baseline unless a candidate's beats it) picks from this forecast, against the best arm
    tried."""
    from dataclasses import replace

    from opsdctl.stats import forecast

    if not row.get("inputs"):
        return [], None
    inp = decision.inputs_of(row["inputs"])
    noise, ref, family = inp.noise, inp.reference, inp.family
    if true_sd:  # compare's published mean carries the run variance in use: the true one here
        noise = forecast.NoiseParts(max(0.0, row["sigma"] ** 2 - noise.eval_var), noise.eval_var, None)
        ref = None if ref is None else replace(ref, sd=row["sigma"])
    if fixed_family:
        family = replace(family, null_strength=0.0, side_strength=0.0, scale_log_sd=0.0)
    kw = {} if power is None else {"sigma_by_arms": power}
    post = forecast.posterior(inp.baseline, inp.candidates, noise, ref, family, **kw)
    fc = dict(zip(post.names, post.forecasts(draws=2_000)))
    arms = [{"p_above": fc[a["name"]].p_above_reference, "above": a["above"], "sigma": row["sigma"]}
            for a in row["arms"] if a["name"] in fc]
    return arms, (row["sigma"], _pick_regret(row, fc))


def _pick_regret(row: dict, forecasts: dict) -> float:
    """The forecast-mean rule (the highest forecast mean above the baseline's: what pick_leader applied
    before opsdctl.stats.bet's rule) on `forecasts` (arm -> its forecast), scored by the arms' true
    effects against the best arm tried: a measure of the forecast's shapes, not of today's rule."""
    from opsdctl.stats.bet import choose

    effect = {a["name"]: a["effect"] for a in row["arms"]}
    base = row["arms"][0]["name"]  # the forecast's arm 0 is the baseline
    names = [n for n in forecasts if n != base]
    i = choose([forecasts[n].mean for n in names], [1.0] * len(names), forecasts[base].mean, 0.0,
               tie=[forecasts[n].p_best for n in names])
    pick = base if i is None else names[i]
    return max(effect.values()) - effect[pick]


def _again(job: tuple) -> tuple[list[dict], tuple | None]:
    row, true_sd, fixed_family, power = job
    return forecast_again(row, true_sd, fixed_family, power)


def study(rows: list[dict], processes: int = 2) -> dict:
    arms = arms_of(rows)
    out = {"sessions": len(rows), "arms": len(arms), "families": {}}
    # what compare printed: the forecast's own p_above_reference (level and sd estimated)
    out["families"]["the forecast (compare's p_above_reference)"] = _judged(
        [{"p_above": a["forecast"], "above": a["above"], "sigma": a["sigma"]} for a in arms if a["forecast"] is not None],
        [(r["sigma"], r["regret"]["forecast"]) for r in rows])
    for fam, slab in FAMILIES.items():
        for sd_mode in ("true sd", "published sd"):
            out["families"][f"{fam}, {sd_mode}"] = _judged(
                [{"p_above": p_above(a, slab, a["sigma"] if sd_mode == "true sd" else PUBLISHED_SD),
                  "above": a["above"], "sigma": a["sigma"]} for a in arms])
    out["families"][f"mix, sd integrated (published sd on {PUBLISHED_DOF} dof, weighed by the arms)"] = _judged(
        [x for r in rows for x in sigma_integrated(r)])
    if not all(r.get("inputs") is not None for r in rows):
        print("calibration_shapes: these rows do not hold the forecast's inputs (decision.py from before they were "
              "kept): the rows of the forecast built again are left out; re-run `python benchmarks/decision.py --rows "
              "ROWS` for them", file=sys.stderr)
    else:
        from multiprocessing import Pool

        with Pool(max(1, processes)) as pool:
            for name, flags in AGAIN.items():
                again = pool.map(_again, [(r, *flags) for r in rows], chunksize=8)
                out["families"][name] = _judged([x for xs, _ in again for x in xs], [g for _, g in again if g is not None])
    return out


def markdown(doc: dict, command: str) -> str:
    keys = ["all", *(f"sd {s:g}" for s in decision.SIGMAS)]
    lines = [f"# Calibration of p_above_reference under three families and two sds ({doc['sessions']} sessions, "
             f"{doc['arms']} arms)", "", f"Command: `{command}`. Exact posteriors knowing the local baseline level (the forecast's "
             "rows estimate it, as compare does); "
             "worst decile gap (deciles with >= 20 arms) / the sampling floor (median worst gap of exactly right "
             "probabilities on the same arms). Regret: the mean over sessions of the best arm tried minus the arm "
             "export-recipe --leader's rule picks from that forecast (true effects; the rows that are no forecast have none).", "",
             "| family, sd | " + " | ".join(keys) + " | regret of the pick |", "|---" * (len(keys) + 2) + "|"]
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for name, by in doc["families"].items():
        lines.append(f"| {name} | " + " | ".join(f"{fmt(by[k]['worst_gap'])} / {fmt(by[k]['floor_median'])}"
                                                  for k in keys) + f" | {fmt(by['all'].get('regret'))} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", type=Path, help="decision.py --rows output (JSON lines)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--processes", type=int, default=2, help="worker processes for the forecast built again")
    args = ap.parse_args(argv)
    try:
        rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        print(f"calibration_shapes: cannot read {args.rows}: {e}; make it with "
              "`python benchmarks/decision.py --rows FILE`", file=sys.stderr)
        return 2
    usable = lambda r: isinstance(r, dict) and "level" in r and bool(r.get("arms")) and all(  # noqa: E731
        isinstance(a, dict) and {"runs", "above", "name"} <= set(a) for a in r["arms"])
    if not rows or not all(usable(r) for r in rows):
        print(f"calibration_shapes: {args.rows} holds no session rows with arms' runs and levels; make it "
              "with this version's `python benchmarks/decision.py --rows FILE`", file=sys.stderr)
        return 2
    doc = study(rows, args.processes)
    command = "python benchmarks/decision.py --rows ROWS && python benchmarks/calibration_shapes.py ROWS"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration_shapes.json").write_text(json.dumps({"command": command, **doc}, indent=1) + "\n")
    md = markdown(doc, command)
    (args.out / "calibration_shapes.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
