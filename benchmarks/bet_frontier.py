"""The submission rule's frontier: how far any one-session rule gets on both bet goals at once.

    python benchmarks/bet_frontier.py --sessions 1000 --processes 2     # benchmarks/results/bet_frontier.md

The world suite's two submission goals pull against each other: the gain goal (within 0.15 of
the better of "highest local mean" and "submit the baseline") wants a lucky-looking idea
submitted, P(worse than the baseline by > 1) <= 5% wants it held back, and one session's runs
tell a mix with a real winner from a mostly harmful family only weakly. This sweeps the shipped
rule (opsdctl.stats.bet: the normal family, P(effect > 0) >= threshold) and three richer rules
over their thresholds on the fixed layouts of the tune worlds, drawn by bet_offline.simulate on
its own seed (11: neither the tune nor the held-out split of benchmarks/worlds.py):

  normal     the shipped model (bet.family_posterior) at TAU_MIN 1 and 0.5
  tail cap   the same posterior, and also P(effect < -1) <= cap: the P(worse) goal asked directly
  penalty    the same posterior, each candidate scored mean - c P(effect < -1) (submitted where that
             is above 0 and P(effect > 0) >= threshold): the P(worse) goal priced rather than capped
  special    a family with "special" ideas: each idea is, with prior probability p, drawn from a
             wide N(mu, sd^2) instead of N(mu, tau^2), at most two per session (so a tight family
             can shrink a lucky idea hard while a real winner still stands out); TAU_MIN 0.5
  noise      the run variance integrated on equal-mass nodes of its scaled inverse chi^2, so the
             candidates' own scatter informs it too (the shipped rule plugs in s^2 and reads t)

Scored with worlds.score (the same goals and paired test as the suite). A rule meets the goals
where a row has 0 cells failing either; the table shows none does on these seeds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bet_offline import simulate  # noqa: E402
from worlds import level_of, score  # noqa: E402

from opsdctl.stats import bet  # noqa: E402
from opsdctl.stats.special import ndtr, stdtr  # noqa: E402

THRESHOLDS = (0.55, 0.6, 0.65, 0.7, 0.75)
TAIL_CAPS = (0.1, 0.15, 0.2)
PENALTIES = (0.5, 1.0, 2.0, 3.0, 5.0)  # points of mean given up per unit of P(effect < -1)


@dataclass(frozen=True)
class Model:
    """One posterior of the candidates' effects: its label, kind and constants."""

    label: str
    kind: str  # normal | special | noise
    tau_min: float = bet.TAU_MIN
    p_special: float = 0.0
    special_sd: float = 3.0
    noise_nodes: int = 8


MODELS = (
    Model("normal (shipped), tau_min 1", "normal"),
    Model("normal, tau_min 0.5", "normal", tau_min=0.5),
    Model("special p 0.1 sd 3, tau_min 0.5", "special", tau_min=0.5, p_special=0.1),
    Model("special p 0.2 sd 4, tau_min 0.5", "special", tau_min=0.5, p_special=0.2, special_sd=4.0),
    Model("noise integrated, tau_min 1", "noise"),
)


def _gauss(x: np.ndarray, own: np.ndarray, v_common: float, diag: np.ndarray, logprior: np.ndarray):
    """The family's Gaussian posterior at each node g (diag[g]: the effects' own prior variances
    around mu): (log weights, means (g, k), sds (g, k)). bet.family_posterior's algebra with a
    per-node diagonal, which the shipped function (one tau for every idea) does not take; the
    test checks the two agree where the richer models reduce to it."""
    k = x.size
    one = np.ones((k, k))
    c = bet.MU_SD ** 2 * one[None] + diag[:, :, None] * np.eye(k)[None]
    s = c + v_common * one[None] + np.diag(own)[None]
    chol = np.linalg.cholesky(s)
    sinv_x = np.linalg.solve(s, np.broadcast_to(x[:, None], (len(diag), k, 1)))[..., 0]
    mean = np.einsum("gij,gj->gi", c, sinv_x)
    var = np.diagonal(c, axis1=1, axis2=2) - np.einsum("gij,gji->gi", c, np.linalg.solve(s, c))
    loglik = -0.5 * np.einsum("gi,i->g", sinv_x, x) - np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
    return loglik + logprior, mean, np.sqrt(np.maximum(var, 1e-300))


def _normalised(log_w: np.ndarray) -> np.ndarray:
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


def _specials(k: int, most: int = 2) -> np.ndarray:
    """Every subset of at most `most` of k ideas, as rows of flags."""
    rows = [np.zeros(k, bool)]
    for m in range(1, most + 1):
        for idx in itertools.combinations(range(k), m):
            r = np.zeros(k, bool)
            r[list(idx)] = True
            rows.append(r)
    return np.array(rows)


def posterior(model: Model, x, n_runs, s2: float, nu: float, v_common: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each candidate's posterior mean, P(effect > 0) and P(effect < -1) under `model`."""
    x = np.asarray(x, dtype=np.float64)
    n = np.asarray(n_runs, dtype=np.float64)
    tau = bet.tau_nodes(model.tau_min)
    tau_prior = -np.log1p((tau / bet.TAU_SCALE) ** 2)
    if model.kind == "noise":  # sigma^2 on equal-mass nodes; the level's variance scales with it
        from scipy.stats import chi2

        q = chi2.ppf((np.arange(model.noise_nodes) + 0.5) / model.noise_nodes, nu)
        parts = [_gauss(x, s2j / n, v_common * s2j / s2, np.repeat(tau[:, None] ** 2, x.size, 1), tau_prior)
                 for s2j in nu * s2 / q]
        lw, m, sd = (np.concatenate(p) for p in zip(*parts))
        w = _normalised(lw)
    elif model.kind == "special":
        flags = _specials(x.size)
        diag = np.where(flags[:, None, :], model.special_sd ** 2, tau[None, :, None] ** 2).reshape(-1, x.size)
        k_sp = flags.sum(axis=1)
        prior = k_sp * math.log(model.p_special) + (x.size - k_sp) * math.log1p(-model.p_special)
        lw, m, sd = _gauss(x, s2 / n, v_common, diag, (prior[:, None] + tau_prior[None, :]).reshape(-1))
        w = _normalised(lw)
    else:  # the shipped model itself
        w, m, sd, _ = bet.family_posterior(x, s2 / n, v_common, bet.MU_SD, bet.TAU_SCALE, tau)
    # the noise integrated: normal per node; else Student's t on the estimate's dof, as the shipped rule reads it
    cdf = ndtr if model.kind == "noise" or not nu else (lambda z: stdtr(float(nu), z))
    return w @ m, w @ cdf(m / sd), w @ cdf((-1.0 - m) / sd)


def _posteriors(job):
    """One model's posteriors over every session of the simulated cells (a process's share)."""
    model, sessions, seed = job
    t0 = time.time()
    out = {}
    for key, rows in simulate(sessions, seed).items():
        cells = []
        for row in rows:
            c = [a for a in row["arms"] if a["name"] != "baseline"]
            level = level_of(row)
            cells.append((posterior(model, [a["local"] - level[0] for a in c], [a["n"] for a in c], row["s2"], row["nu"],
                                    level[1]), [a["effect"] for a in c], row["gain"]["local mean"]))
        out[key] = cells
    return model, out, time.time() - t0


def _rows(model: Model, cells: dict, thresholds, caps=(), penalties=()) -> list[dict]:
    """The model's rule at each threshold: alone, with each penalty, with each tail cap; scored with
    the suite's goals."""
    out = []
    variants = [(None, None)] + [(None, pen) for pen in penalties] + [(cap, None) for cap in caps]
    for t, (cap, pen) in itertools.product(thresholds, variants):
        results, picks = {}, {}
        for key, sessions in cells.items():
            rows = []
            for (mean, p0, pm1), effects, local in sessions:
                sc = mean - (0.0 if pen is None else pen) * pm1
                ok = (p0 >= t) & (sc > 0.0) & (pm1 <= (1.0 if cap is None else cap))
                row = {"gain": {"local mean": local}}
                picks[id(row)] = 0.0 if not ok.any() else effects[int(np.argmax(np.where(ok, sc, -np.inf)))]
                rows.append(row)
            results[key] = rows
        s = score(results, lambda r: picks[id(r)])
        out.append({"model": model.label, "threshold": t, "tail_cap": cap, "penalty": pen, "fail_gain": s["fail_gain"],
                    "fail_worse": s["fail_worse"], "fail_either": sorted(set(s["fail_gain"]) | set(s["fail_worse"])),
                    "margin": round(s["margin"], 4), "worst_p_worse": round(s["worst"], 4), "mean_gain": round(s["mean"], 4)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000, help="sessions per world and fixed layout")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if args.sessions < 2:
        raise SystemExit(f"--sessions {args.sessions}: at least 2 (the gain goal's paired test needs a standard error)")
    t0 = time.time()
    rows, seconds = [], {}
    with ProcessPoolExecutor(max_workers=max(1, args.processes)) as pool:
        for model, cells, s in pool.map(_posteriors, [(m, args.sessions, args.seed) for m in MODELS]):
            seconds[model.label] = round(s, 1)
            shipped = model.kind == "normal" and model.tau_min == bet.TAU_MIN
            rows += _rows(model, cells, THRESHOLDS, TAIL_CAPS if shipped else (), PENALTIES if shipped else ())
            print(f"{model.label}: {s:.0f} s", flush=True)
    n_cells = len(simulate(2, args.seed))
    write(args.out, rows, args, n_cells, round(time.time() - t0, 1), seconds)
    return 0


def write(out: Path, rows: list[dict], args, n_cells: int, wall: float, seconds: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    best = min(len(r["fail_either"]) for r in rows)
    lines = [
        "# The submission rule's frontier (tune worlds, simulated fixed layouts)", "",
        f"Command: `python benchmarks/bet_frontier.py --sessions {args.sessions} --processes {args.processes}` "
        f"({wall:.0f} s; seed {args.seed}, {args.sessions} sessions in each of {n_cells} world x layout cells, "
        "the world suite's goals and paired test). Each row: one rule at one threshold; a cell fails when the "
        "rule misses the gain goal or P(worse by > 1) <= 5% there.", "",
        "| rule | P(effect > 0) >= | P(effect < -1) <= | penalty c | cells failing gain | failing P(worse) "
        "| failing either | worst gain margin | worst P(worse) | mean gain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['threshold']:.2f} | {'-' if r['tail_cap'] is None else r['tail_cap']} "
                     f"| {'-' if r['penalty'] is None else r['penalty']} | {len(r['fail_gain'])} | {len(r['fail_worse'])} | {len(r['fail_either'])} | {r['margin']:+.3f} "
                     f"| {r['worst_p_worse']:.3f} | {r['mean_gain']:+.3f} |")
    shipped = next(r for r in rows if r["model"] == MODELS[0].label and r["threshold"] == bet.P_SUBMIT and r["tail_cap"] is None
                   and r["penalty"] is None)
    lines += ["", f"Fewest cells failing either goal: {best} of {n_cells}. The shipped rule (threshold {bet.P_SUBMIT}): "
              f"gain misses {'; '.join(shipped['fail_gain']) or 'none'}; P(worse) misses "
              f"{'; '.join(shipped['fail_worse']) or 'none'}.", "",
              "Seconds per model (its posteriors over every session): "
              + ", ".join(f"{k} {v:g}" for k, v in seconds.items()) + "."]
    (out / "bet_frontier.md").write_text("\n".join(lines) + "\n")
    (out / "bet_frontier.json").write_text(json.dumps({"sessions": args.sessions, "seed": args.seed, "cells": n_cells,
                                                       "fewest_failing": best, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
