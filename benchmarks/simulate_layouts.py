"""Simulated 6-hour sessions per GPU layout: what 4, 2 or 1 GPUs per chain give a session.

    python benchmarks/simulate_layouts.py                         # the committed figures (120 sessions a layout; ~12 min with --jobs 2)
    python benchmarks/simulate_layouts.py [--sessions 120] [--seed 20000] [--policy NAME ...] [--jobs 1] [--out DIR]

The same code as `opsdctl simulate --gpus-per-chain N` (opsdctl.sim.results.run_benchmark): the
worker's own loop and gate over a fake clock, the planner policies on the session's 4 GPUs in slots
of N (opsdctl.sim.slots), each stage's duration the world's 4-GPU range x the layout factor of
opsdctl/plan/layout_costs.py: from one H100's run (benchmarks/gpu_throughput.py; the evaluations
predicted by its engine model), so these figures are what that run implies for the profile's stage
lengths, not a session measured on four GPUs. The seeds (20000 on) are held out:
no constant of the planner or the world was chosen on them. Writes
benchmarks/results/simulate_layouts.json and .md (or under --out).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from multiprocessing import Pool
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYOUTS = (4, 2, 1)
POLICIES = ("adaptive", "verdicts, auto-repeat first")  # the default worker, and the opt-in for verdicts
FIGURES = ("chains_scored", "chains_cut", "submission_gain", "submission_regret", "settled", "correct")


def _one(job: tuple) -> tuple[int, dict]:
    sys.path.insert(0, str(REPO))
    from opsdctl.sim.results import run_benchmark

    g, sessions, seed, policies = job
    return g, run_benchmark(sessions=sessions, seed=seed, policies=list(policies), gpus_per_chain=g)


def summary(docs: dict[int, dict]) -> dict:
    """Per policy and layout: the figures the table prints (means and standard errors)."""
    out: dict[str, dict] = {}
    for g, doc in sorted(docs.items(), reverse=True):
        for name, r in doc["policies"].items():
            row = {f: r[f] for f in FIGURES}
            row.update(wrong_per_session=r["wrong_per_session"], gpu_busy_frac_until_idle=r["gpu_busy_frac_until_idle"],
                       layout_factors=doc["setup"]["layout_factors"])
            out.setdefault(name, {})[str(g)] = row
    return out


def markdown(doc: dict) -> str:
    st = doc["setup"]
    lines = [f"# Simulated sessions per GPU layout ({st['sessions']} sessions a layout, seeds {st['seed']}.."
             f"{st['seed'] + st['sessions'] - 1}, held out; {st['hours']:g} h on 4 GPUs)", "",
             "`python benchmarks/simulate_layouts.py`: the worker's own loop and gate (`opsdctl simulate "
             "--gpus-per-chain N`), stage durations = the world's 4-GPU ranges (train "
             f"{st['train_min'][0]:g}-{st['train_min'][1]:g} min, eval {st['eval_min'][0]:g}-{st['eval_min'][1]:g} min) x "
             "the layout factors of opsdctl/plan/layout_costs.py (from one H100's run, "
             "benchmarks/results/throughput_h100.json; evaluations predicted by its engine model). True effects "
             f"{', '.join(f'{e:+g}' for e in st['effects'])} points.", ""]
    for name, rows in doc["by_policy"].items():
        lines += [f"## {name}", "",
                  "| GPUs per chain | factors (train, eval) | chains scored | vs 4 GPUs | cut by deadline "
                  "| submission's true gain | regret | settled | correct | wrong / session |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        four = rows["4"]["chains_scored"]["mean"]
        for g, r in rows.items():
            f = r["layout_factors"]
            lines.append(
                f"| {g} | {f['train']:g}, {f['eval']:g} | {r['chains_scored']['mean']:.2f} ± {r['chains_scored']['se']:.2f} "
                f"| {r['chains_scored']['mean'] / four:.2f}x | {r['chains_cut']['mean']:.2f} "
                f"| {r['submission_gain']['mean']:+.2f} ± {r['submission_gain']['se']:.2f} "
                f"| {r['submission_regret']['mean']:.2f} | {r['settled']['mean']:.2f} "
                f"| {r['correct']['mean']:.2f} ± {r['correct']['se']:.2f} | {r['wrong_per_session']:.3f} |")
        lines.append("")
    lines += ["Chains scored: chains that finished with a score (futility stops and cuts are not); the submission: "
              "what `export-recipe --leader` picks from the final report, scored by its true effect; settled / "
              "correct / wrong: final compare verdicts (better/worse), right or wrong about the true effect. "
              "± is one standard error over sessions."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=120, help="sessions per layout and policy")
    ap.add_argument("--seed", type=int, default=20000, help="base seed (session i uses seed + i)")
    ap.add_argument("--policy", action="append", help=f"planner policy to run (repeat); default: {', '.join(POLICIES)}")
    ap.add_argument("--jobs", type=int, default=1, help="processes (one per layout at most)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if args.sessions < 2:
        raise SystemExit(f"--sessions {args.sessions}: at least 2 (standard errors need two sessions)")
    policies = tuple(args.policy or POLICIES)
    t0 = time.time()
    jobs = [(g, args.sessions, args.seed, policies) for g in LAYOUTS]
    if args.jobs > 1:
        with Pool(min(args.jobs, len(jobs))) as pool:
            docs = dict(pool.map(_one, jobs))
    else:
        docs = dict(map(_one, jobs))
    setup = {k: v for k, v in docs[4]["setup"].items() if k not in ("gpus_per_chain", "layout_factors")}
    doc = {"benchmark": "simulate_layouts", "setup": setup, "policies": list(policies),
           "layout_factors_measured": docs[4]["setup"]["layout_factors"]["measured"],
           "by_policy": summary(docs), "seconds": round(time.time() - t0, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "simulate_layouts.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(doc)
    (args.out / "simulate_layouts.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
