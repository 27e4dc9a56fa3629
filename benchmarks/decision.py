"""What to submit: three submission rules over simulated 6-hour sessions through the real worker loop.

    python benchmarks/decision.py                    # the committed figures: 1,000 sessions
    python benchmarks/decision.py --sessions 5 --out /tmp/d
    python benchmarks/decision.py --seed 0 1         # 2,000 sessions pooled: decision_seeds_0_1.*

Every session runs opsdctl/sim/replay.py's `simulate_session` (the worker's own loop, gate and
adaptive policy with --auto-repeat, so `opsdctl advise`'s ranking picks the chains) with six ideas
drawn from a realistic mix: half null, a third harmful (U(-5, -1) points), the rest helpful
(U(+1, +4)); the run-to-run sd is 1.48 or 2.5 points (the config's published sd stays 1.48, so 2.5
is a wrong prior) and the local setup sits 0, +1 or +2 points off the official baseline, whose true
mean is drawn around the published 54.22 as a 5-run mean's noise puts it (the published figure is
one such mean); the six conditions take turns. On compare's final report, three rules pick the submission:

  P(beat)     today's export rule: the `better` candidate with the highest P(beat), else the
              undecided one with the highest P(beat) >= 0.5, else the baseline
  local mean  the arm with the highest local mean (the baseline's mean as compare combines it)
  forecast    the new rule, what `export-recipe --leader` submits (opsdctl.plan.submission.pick_leader):
              the arm with the highest forecast official mean, baseline included

Figures per rule: the submission's true official mean minus the baseline's (mean, 5th
percentile), regret against the best arm tried (baseline included) and against the best idea queued
(tried or not; beside the replaced pipeline when decision_today.py ran first), P(worse than the baseline by
more than 1 point). For the forecast: coverage of its 80% interval and calibration of
p_above_reference by decile, against each arm's drawn official 5-run mean (the quantity the
forecast predicts). Goals: regret >= 30% below the P(beat) rule; P(worse by > 1) <= 5%; coverage
75-85%; every decile within 5 points of its observed frequency.
Writes benchmarks/results/decision.json and decision.md (or --out DIR).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from scipy.special import ndtr

from results_file import write_results

REPO = Path(__file__).resolve().parent.parent
SIGMAS = (1.48, 2.5)
OFFSETS = (0.0, 1.0, 2.0)
IDEAS = 6
RULES = ("P(beat)", "local mean", "forecast", "oracle")


def draw_effects(rng: np.random.Generator, n: int = IDEAS) -> tuple[float, ...]:
    """Half null, a third harmful U(-5, -1), the rest helpful U(+1, +4)."""
    kind = rng.choice(3, size=n, p=[1 / 2, 1 / 3, 1 / 6])
    return tuple(0.0 if k == 0 else float(rng.uniform(-5, -1)) if k == 1 else float(rng.uniform(1, 4)) for k in kind)


def _pbeat_rule(report) -> str:
    """Today's export rule (opsdctl/daemon/auto_export.py as it stood before the forecast)."""
    full = report.full
    better = [e for e in full if e.verdict == "better"]
    key = lambda e: (e.p_beat if e.p_beat is not None else -1.0, e.mean or 0.0)  # noqa: E731
    if better:
        return max(better, key=key).name
    ahead = [e for e in full if e.verdict == "undecided" and (e.p_beat or 0.0) >= 0.5]
    return max(ahead, key=key).name if ahead else report.baseline.name


def _local_mean_rule(report) -> str:
    best = max(report.full, key=lambda e: e.mean, default=None)
    b = report.baseline
    return best.name if best is not None and (b.mean is None or best.mean > b.mean) else b.name


def mix_slab() -> tuple[np.ndarray, np.ndarray]:
    """draw_effects' non-null ideas as (effect grid, prior mass): a third U(-5, -1), a sixth U(+1, +4)."""
    h, g = np.linspace(-5.0, -1.0, 201), np.linspace(1.0, 4.0, 151)
    return np.concatenate([h, g]), np.concatenate([np.full(h.size, (1 / 3) / h.size), np.full(g.size, (1 / 6) / g.size)])


MIX_SLAB = mix_slab()
NULL = 0.5  # draw_effects' share of ideas that do nothing


def mix_terms(ys, level: float, sigmas, slab: tuple[np.ndarray, np.ndarray] = MIX_SLAB,
              null: float = NULL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One idea's exact posterior at each run sd in `sigmas`, the local baseline level `level`
    known, its effect 0 with probability `null`, else on slab's grid with its mass (default: the
    benchmark's own mix): (the density of its local mean, which sds compare by; its posterior mean
    effect; P(its official 5-run mean is above the published mean)), each an array over `sigmas`
    (the mean 0 and P 0.5 where no node explains the runs). The official mean minus the published
    one is the effect plus N(0, 2 sigma^2 / 5): the true baseline's draw around the published figure
    and the 5 re-trains' own noise."""
    ys = np.asarray(ys, dtype=float)
    grid, mass = slab
    s = np.atleast_1d(np.asarray(sigmas, dtype=float))
    se = (s / math.sqrt(ys.size))[:, None]
    x = ys.mean() - level
    w0 = null * np.exp(-0.5 * (x / se[:, 0]) ** 2)
    ws = mass[None, :] * np.exp(-0.5 * ((x - grid[None, :]) / se) ** 2)
    z = w0 + ws.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(z > 0, ws @ grid / z, 0.0)
        p = np.where(z > 0, (0.5 * w0 + (ws * ndtr(grid[None, :] / (s[:, None] * math.sqrt(2.0 / 5.0)))).sum(axis=1)) / z,
                     0.5)
    return z / (se[:, 0] * math.sqrt(2.0 * math.pi)), m, p


def _bayes(ys, level: float, sigma: float, slab: tuple[np.ndarray, np.ndarray] = MIX_SLAB,
           null: float = NULL) -> tuple[float, float]:
    """mix_terms at one sd: (the idea's posterior mean effect, P(its official 5-run mean is above
    the published mean))."""
    _, m, p = mix_terms(ys, level, sigma, slab, null)
    return float(m[0]), float(p[0])


def _oracle_rule(report, baseline_mean: float, sigma: float) -> str:
    """The floor no rule can beat on the same data: the Bayes rule that knows the benchmark's true
    mix of effects (draw_effects), the run-to-run sd and the baseline's local mean exactly, and
    submits the arm with the highest posterior mean effect (the baseline's is 0)."""
    best, best_m = report.baseline.name, 0.0
    for e in report.full:
        m, _ = _bayes(e.runs, baseline_mean, sigma)
        if m > best_m:
            best, best_m = e.name, m
    return best


def scored(picks: dict, true: dict, best: float, effects) -> dict:
    """Each rule's pick (`picks`: rule -> arm) scored by `true` (arm -> true effect): its gain over
    the baseline, its regret against `best` (the best arm tried) and against the best idea queued,
    tried or not (the best of `effects` and the baseline)."""
    queued = max((0.0, *effects))
    return {"gain": {r: true[p] for r, p in picks.items()}, "regret": {r: best - true[p] for r, p in picks.items()},
            "regret_queued": {r: queued - true[p] for r, p in picks.items()}}


def rule_figures(rows: list[dict], rule: str) -> dict:
    """One rule over the sessions' rows (scored): gain (mean, 5th percentile), regret against the
    best arm tried (mean, SE) and the best idea queued, P(worse than the baseline by more than a point)."""
    g = np.array([x["gain"][rule] for x in rows])
    reg = np.array([x["regret"][rule] for x in rows])
    return {"gain_mean": round(float(g.mean()), 4), "gain_p5": round(float(np.percentile(g, 5)), 4),
            "regret_mean": round(float(reg.mean()), 4),
            "regret_se": round(float(reg.std(ddof=1) / math.sqrt(reg.size)), 4) if reg.size > 1 else None,
            "regret_queued_mean": round(float(np.mean([x["regret_queued"][rule] for x in rows])), 4),
            "p_worse_1": round(float(np.mean(g < -1.0)), 4)}


def one_session(i: int, seed: int = 0, hours: float = 6.0, right_prior: bool = False) -> dict:
    """One session; `right_prior`: the config's published sd is the world's (a diagnostic: what the
    wrong prior of the sd 2.5 conditions costs), else the published 1.48 whatever the world's."""
    sys.path.insert(0, str(REPO))
    from opsdctl.sim.replay import simulate_session
    from opsdctl.sim.world import BASE_MEAN, BASELINE, REFERENCE, World
    from opsdctl.stats.compare import Reference

    rng = np.random.default_rng([seed, i])
    sigma, offset = SIGMAS[i % 2], OFFSETS[(i // 2) % 3]
    effects = draw_effects(rng)
    # the published mean is itself the mean of 5 official runs: the true official baseline sits
    # N(0, sigma^2 / 5) away from it, and the local runs sit the setup offset away from that truth
    true_base = BASE_MEAN + rng.normal(0.0, sigma / math.sqrt(5))
    res = simulate_session("adaptive", seed * 1_000_003 + i, hours=hours, effects=effects,
                           world=World.make(sigma), offset=true_base - BASE_MEAN + offset,
                           reference=Reference(BASE_MEAN, sigma, REFERENCE.n) if right_prior else REFERENCE)
    rep = res.report
    true = {BASELINE: 0.0, **{name: eff for name, (_, eff) in res.verdicts.items()}}  # every idea with a full run
    tried = [BASELINE] + [e.name for e in rep.full]
    post = rep.posterior  # the model behind compare's printed forecasts
    # the forecast rule is what the simulated session submitted (plan.submission.pick_leader)
    picks = {"P(beat)": _pbeat_rule(rep), "local mean": _local_mean_rule(rep), "forecast": res.submitted,
             "oracle": _oracle_rule(rep, true_base + offset, sigma)}
    arms = []
    if post is not None:
        fc = post.forecasts()
        runs = {e.name: list(e.runs) for e in rep.full}
        for name, f in zip(post.names, fc):
            official = true_base + true[name] + rng.normal(0.0, sigma / math.sqrt(5))  # the scorer's 5 re-trains
            arms.append({"name": name, "effect": true[name], "runs": runs.get(name, []), "low80": f.low80,
                         "high80": f.high80, "p_above": f.p_above_reference,
                         "p_above_bayes": _bayes(runs[name], true_base + offset, sigma)[1] if name in runs else 0.5,
                         "official": official, "above": official > BASE_MEAN})
    return {"i": i, "seed": seed, "sigma": sigma, "offset": offset, "level": true_base + offset, "effects": list(effects),
            "chains": res.succeeded, "tried": len(tried) - 1, "picks": picks,
            **scored(picks, true, max(true[n] for n in tried), effects), "arms": arms,
            "inputs": None if post is None else inputs_json(post.inputs)}


def inputs_json(inputs) -> dict:
    """The final forecast's inputs (opsdctl.stats.forecast.Inputs) as plain JSON, family left out
    (the default): calibration_shapes.py builds the forecast again from them (inputs_of)."""
    arm = lambda a: {"name": a.name, "scores": list(a.scores), "eval_vars": list(a.eval_vars)}  # noqa: E731
    ref = inputs.reference
    return {"baseline": arm(inputs.baseline), "candidates": [arm(c) for c in inputs.candidates],
            "noise": {"train_var": inputs.noise.train_var, "eval_var": inputs.noise.eval_var, "dof": inputs.noise.dof},
            "reference": None if ref is None else {"mean": ref.mean, "sd": ref.sd, "n": ref.n, "offset_sd": ref.offset_sd}}


def inputs_of(doc: dict):
    """inputs_json's document back as opsdctl.stats.forecast.Inputs (the default family)."""
    from opsdctl.stats import forecast

    arm = lambda a: forecast.ArmRuns(a["name"], tuple(a["scores"]), tuple(a["eval_vars"]))  # noqa: E731
    nz, ref = doc["noise"], doc["reference"]
    return forecast.Inputs(arm(doc["baseline"]), tuple(arm(c) for c in doc["candidates"]),
                           forecast.NoiseParts(nz["train_var"], nz["eval_var"], nz["dof"]),
                           None if ref is None else forecast.PublishedRef(ref["mean"], ref["sd"], ref["n"], ref["offset_sd"]),
                           forecast.FamilyPrior())


MIN_DECILE_ARMS = 20  # a decile with fewer arms is shown but not judged


def decile_of(ps) -> np.ndarray:
    """The decile index of each probability, 0..9 (1.0 in the last): the one binning rule of the
    calibration table and of its sampling floor."""
    return np.minimum((np.asarray(ps, dtype=float) * 10).astype(int), 9)


def _deciles(arms: list[dict], key: str = "p_above") -> list[dict]:
    """p_above_reference (or `key`) by decile against how often the drawn official mean was above it."""
    ps = [a for a in arms if a.get(key) is not None]
    bins = decile_of([a[key] for a in ps])
    dec = []
    for k in range(10):
        xs = [a for a, b in zip(ps, bins) if b == k]
        dec.append({"decile": f"{k / 10:.1f}-{(k + 1) / 10:.1f}", "n": len(xs),
                    "mean_p": round(float(np.mean([a[key] for a in xs])), 4) if xs else None,
                    "observed": round(float(np.mean([a["above"] for a in xs])), 4) if xs else None})
    return dec


def _worst_gap(dec: list[dict]) -> float | None:
    return max((round(abs(d["mean_p"] - d["observed"]), 4) for d in dec if d["n"] >= MIN_DECILE_ARMS), default=None)


def calibration_floor(ps, goal: float = 0.05, redraws: int = 1000, seed: int = 0) -> dict:
    """The worst decile gap that exactly right probabilities would show on these arms: each
    redraw takes every arm's outcome from its own p and bins the arms as _deciles does. A goal
    near the median of this is a goal on the benchmark's sampling noise, not on the forecast."""
    ps = np.asarray(ps, dtype=float)
    if ps.size == 0:
        return {"median": None, "p90": None, "p_over_goal": None, "redraws": 0}
    k = decile_of(ps)
    n = np.bincount(k, minlength=10)
    judged = n >= MIN_DECILE_ARMS
    if not judged.any():
        return {"median": None, "p90": None, "p_over_goal": None, "redraws": 0}
    mean_p = np.bincount(k, weights=ps, minlength=10)[judged] / n[judged]
    y = np.random.default_rng(seed).random((redraws, ps.size)) < ps  # (redraws, arms)
    hits = (y @ np.eye(10)[k])[:, judged] / n[judged]  # each redraw's hits per decile
    worst = np.max(np.abs(hits - mean_p), axis=1)
    return {"median": round(float(np.median(worst)), 4), "p90": round(float(np.percentile(worst, 90)), 4),
            "p_over_goal": round(float(np.mean(worst > goal)), 4), "redraws": redraws}


def summarize(rows: list[dict]) -> dict:
    out = {"sessions": len(rows), "rules": {}}
    for r in RULES:
        out["rules"][r] = {**rule_figures(rows, r),
                           "baseline_picked": round(float(np.mean([x["picks"][r] == "baseline" for x in rows])), 4)}
    base = out["rules"]["P(beat)"]["regret_mean"]
    out["regret_cut_vs_pbeat"] = round(1.0 - out["rules"]["forecast"]["regret_mean"] / base, 4) if base > 0 else None
    out["oracle_regret_cut_vs_pbeat"] = (round(1.0 - out["rules"]["oracle"]["regret_mean"] / base, 4)
                                         if base > 0 else None)
    arms = [a for x in rows for a in x["arms"]]
    sub = [a for x in rows for a in x["arms"] if a["name"] == x["picks"]["forecast"]]
    cover = lambda xs: round(float(np.mean([a["low80"] <= a["official"] <= a["high80"] for a in xs])), 4) if xs else None  # noqa: E731
    out["coverage80_all_arms"] = cover(arms)
    out["coverage80_submission"] = cover(sub)
    out["calibration"] = _deciles(arms)
    out["worst_decile_gap"] = _worst_gap(out["calibration"])
    out["calibration_floor"] = calibration_floor([a["p_above"] for a in arms if a["p_above"] is not None])
    out["calibration_bayes"] = _deciles(arms, "p_above_bayes")
    out["worst_decile_gap_bayes"] = _worst_gap(out["calibration_bayes"])
    out["by_condition"] = {}
    for s in SIGMAS:
        for o in OFFSETS:
            xs = [x for x in rows if x["sigma"] == s and x["offset"] == o]
            if xs:
                cond = [a for x in xs for a in x["arms"]]
                out["by_condition"][f"sd {s:g}, offset {o:+g}"] = {
                    **{r: {"gain_mean": round(float(np.mean([x["gain"][r] for x in xs])), 3),
                           "regret_mean": round(float(np.mean([x["regret"][r] for x in xs])), 3),
                           "p_worse_1": round(float(np.mean([x["gain"][r] < -1 for x in xs])), 3)} for r in RULES},
                    "coverage80": cover(cond), "worst_decile_gap": _worst_gap(_deciles(cond))}
    out["chains_per_session"] = round(float(np.mean([x["chains"] for x in rows])), 2)
    out["ideas_tried_per_session"] = round(float(np.mean([x["tried"] for x in rows])), 2)
    return out


def markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [f"# What to submit: {s['sessions']} simulated 6-hour sessions through the worker loop", "",
             f"Command: `{doc['command']}` ({doc['seconds']:.0f} s on {doc['processes']} processes). "
             f"{s['chains_per_session']} scored chains and {s['ideas_tried_per_session']} ideas tried per session "
             "(adaptive policy with --auto-repeat: `opsdctl advise`'s ranking)."
             + (" Diagnostic run: the config's published sd is each session's true sd, so the sd 2.5 conditions "
                "have the right prior." if doc.get("right_prior") else ""), "",
             "| rule | true official gain over baseline: mean | 5th pct | regret vs best tried | vs best queued "
             "| P(worse by > 1) | baseline submitted |",
             "|---|---|---|---|---|---|---|"]
    for r in RULES:
        x = s["rules"][r]
        lines.append(f"| {r} | {x['gain_mean']:+.2f} | {x['gain_p5']:+.2f} | {x['regret_mean']:.2f} ± {x['regret_se'] or 0:.2f} "
                     f"| {x['regret_queued_mean']:.2f} | {100 * x['p_worse_1']:.1f}% | {100 * x['baseline_picked']:.0f}% |")
    lines += ["", f"Regret of the forecast rule vs the P(beat) rule on the same sessions (the rule alone): "
              f"{100 * s['regret_cut_vs_pbeat']:.0f}% lower (goal: >= 30%); the oracle's, the floor for any rule on "
              f"these data: {100 * s['oracle_regret_cut_vs_pbeat']:.0f}% lower." if s["regret_cut_vs_pbeat"] is not None else ""]
    today = doc.get("today")
    if today is not None:
        new, old = s["rules"]["forecast"], today["rules"]["P(beat)"]
        cut = 1.0 - new["regret_queued_mean"] / old["regret_queued_mean"] if old["regret_queued_mean"] > 0 else None
        lines += ["", f"Against the pipeline it replaces (`{today['command']}`: the same {today['sessions']} sessions' "
                  f"ideas under commit {today['policy_commit']}'s verdict-driven policy and its P(beat) export, "
                  f"{today['ideas_tried_per_session']} ideas tried a session): the submission's true gain "
                  f"{old['gain_mean']:+.2f} -> {new['gain_mean']:+.2f}; regret vs the best idea queued (tried or not) "
                  f"{old['regret_queued_mean']:.2f} -> {new['regret_queued_mean']:.2f}"
                  + (f", {100 * cut:.0f}% lower (goal: >= 30%)." if cut is not None else "."), ""]
    lines += [
              f"80% forecast interval coverage of the drawn official 5-run mean: {100 * s['coverage80_all_arms']:.1f}% "
              f"of all arms, {100 * s['coverage80_submission']:.1f}% of the submitted one (goal 75-85%).", "",
              "Calibration of p_above_reference (all arms), and of the exact posterior that knows the benchmark's "
              "mix, the true sd and the local baseline level (the oracle's information):", "",
              "| decile | arms | mean p | observed | exact posterior: arms | mean p | observed |",
              "|---|---|---|---|---|---|---|"]
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for d, o in zip(s["calibration"], s["calibration_bayes"]):
        lines.append(f"| {d['decile']} | {d['n']} | {fmt(d['mean_p'])} | {fmt(d['observed'])} "
                     f"| {o['n']} | {fmt(o['mean_p'])} | {fmt(o['observed'])} |")
    fl = s["calibration_floor"]
    lines += ["", f"Largest gap over deciles with >= {MIN_DECILE_ARMS} arms: {s['worst_decile_gap']:.3f} (goal <= 0.05); "
              f"the exact posterior's: {fmt(s['worst_decile_gap_bayes'])}."
              if s["worst_decile_gap"] is not None else "",
              f"Sampling floor: were every p_above_reference exactly right, these arms' largest gap would be "
              f"{fl['median']:.3f} (median of {fl['redraws']:,} redraws of the outcomes from the p values "
              f"themselves; 90th percentile {fl['p90']:.3f}) and above 0.05 in {100 * fl['p_over_goal']:.0f}% of redraws."
              if fl["median"] is not None else "", "",
              "By condition (mean gain / regret / P(worse by > 1); the forecast's 80% coverage and worst decile gap):", "",
              "| condition | " + " | ".join(RULES) + " | coverage | worst gap |", "|---" * (len(RULES) + 3) + "|"]
    for cond, by in s["by_condition"].items():
        fmt = lambda x, f: "-" if x is None else f.format(x)  # noqa: E731
        lines.append(f"| {cond} | " + " | ".join(f"{by[r]['gain_mean']:+.2f} / {by[r]['regret_mean']:.2f} / "
                                                  f"{100 * by[r]['p_worse_1']:.0f}%" for r in RULES)
                     + f" | {fmt(by['coverage80'], '{:.1%}')} | {fmt(by['worst_decile_gap'], '{:.3f}')} |")
    return "\n".join(lines) + "\n"


def _session_of(args: tuple[int, int, bool]) -> dict:
    i, seed, right_prior = args
    return one_session(i, seed, right_prior=right_prior)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000, help="simulated sessions (the six conditions take turns)")
    ap.add_argument("--seed", type=int, nargs="+", default=[0],
                    help="one seed, or several: their sessions pooled (writes decision_seeds_A_B.*: the pooled "
                         "calibration is the finer measure)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    ap.add_argument("--rows", type=Path, default=None, help="also write every session's row here (JSON lines)")
    ap.add_argument("--right-prior", action="store_true",
                    help="diagnostic: the published sd is each session's true sd (writes decision_right_prior.*)")
    args = ap.parse_args(argv)
    args.seed = list(dict.fromkeys(args.seed))
    t0 = time.time()
    rows = []
    with Pool(args.processes) as pool:
        jobs = [(i, seed, args.right_prior) for seed in args.seed for i in range(args.sessions)]
        for row in pool.imap_unordered(_session_of, jobs, chunksize=4):
            rows.append(row)
            if len(rows) % 50 == 0 or len(rows) == len(jobs):
                print(f"decision: {len(rows)}/{len(jobs)} sessions, {time.time() - t0:.0f} s", file=sys.stderr,
                      flush=True)
    rows.sort(key=lambda r: (r["seed"], r["i"]))
    if args.rows is not None:
        args.rows.write_text("".join(json.dumps(r) + "\n" for r in rows))
    seeds = args.seed
    doc = {"command": "python benchmarks/decision.py" + ("" if args.sessions == 1000 else f" --sessions {args.sessions}")
           + ("" if seeds == [0] else " --seed " + " ".join(map(str, seeds)))
           + (" --right-prior" if args.right_prior else ""), "right_prior": args.right_prior,
           "seconds": round(time.time() - t0, 1), "processes": args.processes,
           "seed": seeds[0] if len(seeds) == 1 else seeds, "summary": summarize(rows)}
    today = args.out / "decision_today.json"  # the replaced pipeline on the same sessions, when measured
    if not args.right_prior and len(seeds) == 1 and today.exists():
        t = json.loads(today.read_text())
        if t.get("sessions") == args.sessions and t.get("seed", 0) == seeds[0] and "regret_queued_mean" in t["rules"]["P(beat)"]:
            doc["today"] = t
    stem = "decision_right_prior" if args.right_prior else "decision"
    if len(seeds) > 1:  # pooled seeds: beside the one-seed figures, not over them
        stem += "_seeds_" + "_".join(map(str, seeds))
    write_results(args.out, stem, doc, markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
