"""Many simulated sessions: every policy over the same seeded sessions, and their figures.

Figures per policy (mean over sessions, with standard errors): GPU-busy fraction of the budget
and until the GPUs went idle for good (the last admissible chain), chains cut by the deadline,
settled comparisons (final verdict better/worse), correct ones, and wrong ones in absolute terms
(per session, and per no-effect idea tried) as well as the wrong-verdict rate (of those settled),
and the bet: the true effect of what the submission rule (pick_leader) submits at the end.
`run_benchmark` measures them, `markdown` and `goals_markdown` print them, `write_results`
writes simulate.json and simulate.md.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from opsdctl.plan.layout_costs import MEASURED as LAYOUT_MEASURED
from opsdctl.plan.layout_costs import factor as layout_factor
from opsdctl.sim.replay import POLICIES, simulate_session
from opsdctl.sim.session import ORACLE_IDEAS, SessionResult
from opsdctl.sim.world import (BASE_MEAN, DEFAULT_EFFECTS, EVAL_MIN, K, LOOKS, MARGIN_MIN, N_PROBLEMS, REFERENCE,
                               SIGMA, STAGE_GAP_S, TRAIN_MIN, World)


def mean_se(xs: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0


def summarize(results: Sequence[SessionResult]) -> dict:
    def ms(f):
        m, se = mean_se([f(r) for r in results])
        return {"mean": round(m, 4), "se": round(se, 4)}

    settled = sum(r.settled for r in results)
    wrong = sum(r.wrong for r in results)
    return {
        "sessions": len(results),
        "gpu_busy_frac_budget": ms(lambda r: r.busy_s / r.budget_s),
        "gpu_busy_frac_until_idle": ms(lambda r: r.busy_s / r.last_end_s if r.last_end_s else 0.0),
        "useful_frac_budget": ms(lambda r: r.useful_s / r.budget_s),
        "tail_idle_min": ms(lambda r: (r.budget_s - r.last_end_s) / 60.0),
        "chains_started": ms(lambda r: r.started),
        "chains_scored": ms(lambda r: r.succeeded),
        "chains_cut": ms(lambda r: r.cut),
        "sessions_with_a_cut": sum(1 for r in results if r.cut),
        "skipped_admission": ms(lambda r: r.skipped_admission),
        "skipped_policy": ms(lambda r: r.skipped_policy),
        "eval_skipped": ms(lambda r: r.eval_skipped),
        "futility_stops": ms(lambda r: r.futility_stops),
        "futility_dropped_winners": sum(r.futility_dropped_winners for r in results),
        "auto_repeats": ms(lambda r: r.auto_repeats),
        "reevals": ms(lambda r: r.reevals),
        "baseline_share": ms(lambda r: r.baseline_chains / r.started if r.started else 0.0),
        "idle_min_while_action_fits": ms(lambda r: r.idle_while_fits_s / 60.0),
        "estimate_overruns": sum(r.estimate_overruns for r in results),
        "chain_overruns": sum(r.chain_overruns for r in results),
        "variants_tried": ms(lambda r: r.tried),
        "settled": ms(lambda r: r.settled),
        "answered_incl_futility_drops": ms(lambda r: r.answered),
        "answered_correct": ms(lambda r: r.answered_correct),
        "correct": ms(lambda r: r.correct),
        "submission_gain": ms(lambda r: r.submission_gain),
        "submission_regret": ms(lambda r: r.regret),
        "submission_worse_by_1": ms(lambda r: float(r.submission_gain < -1.0)),
        "wrong": ms(lambda r: r.wrong),
        "winners_found": ms(lambda r: r.winners_found),
        "wrong_verdict_rate": round(wrong / settled, 4) if settled else None,
        # absolute terms: a ratio to settled verdicts hides a rise when more settle
        "wrong_per_session": round(wrong / len(results), 4) if results else None,
        "false_better_per_session": round(sum(r.false_better for r in results) / len(results), 4) if results else None,
        "null_candidates_tried": sum(r.null_tried for r in results),
        "wrong_per_null_candidate_tried": (round(sum(r.null_wrong for r in results) / sum(r.null_tried for r in results), 4)
                                           if sum(r.null_tried for r in results) else None),
    }


def run_benchmark(sessions: int = 200, seed: int = 0, hours: float = 6.0,
                  effects: Sequence[float] = DEFAULT_EFFECTS, policies: Optional[Sequence[str]] = None,
                  gpus_per_chain: Optional[int] = None) -> dict:
    """Every policy over the same seeded sessions (same variant order, same world). With
    `gpus_per_chain`, the planner policies run the session's 4 GPUs in slots of that many
    (opsdctl.sim.slots; stage durations per layout from opsdctl.plan.layout_costs); the policies
    by hand stay one chain at a time on all four, today's way, as the comparison."""
    t0 = time.time()
    world = World.make()
    names = list(policies or POLICIES)
    out = {}
    for name in names:
        per_chain = gpus_per_chain if POLICIES[name][0] == "planner" else None
        out[name] = summarize([simulate_session(name, seed + i, hours, effects, world, gpus_per_chain=per_chain)
                               for i in range(sessions)])
    hand = [n for n in names if POLICIES[n][0] == "hand"]
    best_hand = max(hand, key=lambda n: out[n]["correct"]["mean"]) if hand else None
    doc = {
        "setup": {
            "sessions": sessions, "seed": seed, "hours": hours, "gpus": 4, "effects": list(effects),
            "baseline_reference": {"mean": BASE_MEAN, "sd": SIGMA, "n": REFERENCE.n},
            "sigma_run_to_run": SIGMA, "tau2": round(world.tau2, 3), "v_eval": round(world.v_eval, 3),
            "problems": N_PROBLEMS, "k": K, "looks": list(LOOKS), "train_min": list(TRAIN_MIN),
            "eval_min": list(EVAL_MIN), "stage_gap_s": STAGE_GAP_S, "margin_min": MARGIN_MIN,
            "duration_defaults_min": {"train": 19, "eval": 27},
            "gpus_per_chain": gpus_per_chain,
            "layout_factors": None if gpus_per_chain is None else {
                "train": round(layout_factor("train", gpus_per_chain), 3),
                "eval": round(layout_factor("eval", gpus_per_chain), 3),
                "measured": LAYOUT_MEASURED},
        },
        "policies": out,
        "best_fifo_by_hand": best_hand,
        "seconds": round(time.time() - t0, 1),
    }
    if best_hand:
        base = out[best_hand]["correct"]["mean"]
        doc["ratio_correct_vs_best_fifo"] = {n: (round(out[n]["correct"]["mean"] / base, 3) if base else None)
                                             for n in names}
    doc["markdown"] = markdown(doc)
    return doc


def markdown(doc: dict) -> str:
    st = doc["setup"]
    lines = [
        f"Simulated {st['sessions']} session{'s' if st['sessions'] != 1 else ''} per policy ({st['hours']:g} h, {st['gpus']} GPUs, seeds "
        f"{st['seed']}..{st['seed'] + st['sessions'] - 1}); true effects {', '.join(f'{e:+g}' for e in st['effects'])} "
        f"points vs the reference {st['baseline_reference']['mean']} (sd {st['sigma_run_to_run']}, n = "
        f"{st['baseline_reference']['n']}); train {st['train_min'][0]:g}-{st['train_min'][1]:g} min, eval "
        f"{st['eval_min'][0]:g}-{st['eval_min'][1]:g} min, tau^2 = {st['tau2']}, V_eval = {st['v_eval']}. "
        "Every planner policy runs the worker's own loop (opsdctl.plan.loop.WorkerLoop) and gate."
        + _layout_words(st),
        "",
        "| policy | GPU busy (until the last admissible chain) | idle min while an action fits | chains scored "
        "| cut by deadline | baseline share | auto-repeat chains (re-evals) | variants tried | correct / session | vs best FIFO "
        "| wrong / session | wrong per no-effect idea tried | wrong / settled | futility stops "
        "| submission's true gain (points) | regret vs the best idea | submission worse by > 1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = doc.get("ratio_correct_vs_best_fifo", {})
    for name, r in doc["policies"].items():
        wr = "-" if r["wrong_verdict_rate"] is None else f"{100 * r['wrong_verdict_rate']:.1f}%"
        wn = "-" if r["wrong_per_null_candidate_tried"] is None else f"{r['wrong_per_null_candidate_tried']:.3f}"
        ratio = ratios.get(name)
        lines.append(
            f"| {name} | {100 * r['gpu_busy_frac_until_idle']['mean']:.1f}% | {r['idle_min_while_action_fits']['mean']:.1f} "
            f"| {r['chains_scored']['mean']:.2f} | {r['chains_cut']['mean']:.2f} "
            f"| {100 * r['baseline_share']['mean']:.0f}% | {r['auto_repeats']['mean']:.2f} ({r.get('reevals', {}).get('mean', 0.0):.2f}) "
            f"| {r['variants_tried']['mean']:.2f} "
            f"| {r['correct']['mean']:.3f} ± {r['correct']['se']:.3f} | {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"| {r['wrong_per_session']:.3f} | {wn} | {wr} | {r['futility_stops']['mean']:.2f} "
            f"| {r['submission_gain']['mean']:+.2f} ± {r['submission_gain']['se']:.2f} "
            f"| {r['submission_regret']['mean']:.2f} | {100 * r['submission_worse_by_1']['mean']:.1f}% |"
        )
    lines += ["", "Policies: " + "; ".join(f"**{n}**: {LEGEND[n]}" for n in doc["policies"] if n in LEGEND) + "."]
    lines += ["GPU busy: busy time over the time until the GPUs went idle for good (the end of the last "
              "admissible chain); idle min while an action fits: minutes the GPUs sat idle at the end while "
              "compare's `Next:` proposed runs that fit in the time left; baseline share: the baseline's chains "
              "over all chains started; auto-repeat chains: those the worker queued itself, of them re-evals (fresh "
              "eval samples of a scored checkpoint, pooled with its first eval as one run); settled: final compare verdict `better`/`worse` (compare's rule: over the "
              "ideas tried, valid under repeated looks); wrong: settled the wrong way, per session and per "
              "no-effect idea tried (any settled verdict is wrong for it), and of those settled. The bet: what "
              "`export-recipe --leader` submits from the final report (opsdctl.plan.submission.pick_leader, for "
              "every policy), scored by its true effect over the baseline (the number a researcher is paid on, "
              "less the official re-trains' noise); regret: the best idea queued (or the baseline) minus that."]
    return "\n".join(lines)


def _layout_words(st: dict) -> str:
    per_chain, f = st.get("gpus_per_chain"), st.get("layout_factors")
    if per_chain is None:
        return ""
    return (f" The planner policies run {4 // per_chain} chain(s) at once on {per_chain}-GPU slots; a stage on "
            f"{per_chain} GPU(s) takes the 4-GPU figures x {f['train']:g} (train), x {f['eval']:g} (eval)"
            + (" (layout factors from one H100's run, benchmarks/results/throughput_h100.json)" if f["measured"]
               else " (ESTIMATED layout factors, benchmarks/layout_estimate.py: not measured)")
            + "; the policies by hand run one chain at a time on all four.")


LEGEND = {
    "fifo-by-hand x1": "the user queues the baseline and each idea once and, when the queue runs dry, again "
                       "(round robin); no admission",
    "fifo-by-hand 1-2": "the baseline and each idea once or twice in a row (at random); no admission",
    "fifo-by-hand x2": "the baseline and each idea twice in a row; no admission",
    "oracle x2": f"not a policy but a ceiling: FIFO by hand over the baseline and only the {ORACLE_IDEAS} ideas of "
                 "largest true |effect|, each twice (what the x2 queue's chains settle when no chain is spent "
                 "finding those ideas)",
    "planner fifo": "the x2 queue in queue order, with admission (a chain that cannot finish is skipped)",
    "adaptive": "the x2 queue, `worker --policy adaptive --auto-repeat` (the user's chains first, in the "
                "policy's order; auto-repeat after them)",
    "adaptive, x1 queue": "the baseline and each idea once, `worker --policy adaptive --auto-repeat`: the "
                          "repeats are auto-repeat's",
    "adaptive, auto-repeat first": "the x2 queue, `--policy adaptive --auto-repeat --auto-repeat-first`: the "
                                   "opt-in that lets auto-repeat chains run before the user's",
    "adaptive + futility": "the x2 queue, `--policy adaptive --auto-repeat --futility`",
    "adaptive, every variant first": "the x2 queue, `--policy adaptive --auto-repeat --try-every-variant`: the "
                                     "first run of every queued variant before any repeat (the tiers alone)",
    "verdicts": "the x2 queue, `--policy adaptive --auto-repeat --objective verdicts`: the tiers, the ideas tried "
                "held to what the session's runs can settle; the user's chains first",
    "verdicts, auto-repeat first": "the x2 queue, `--policy adaptive --auto-repeat --auto-repeat-first --objective "
                                   "verdicts`: the same, and its repeats run before the user's untried ideas",
}

GOALS = {"ratio": 1.5, "wrong_per_session": 0.005, "busy": 0.99, "idle_min": 0.0}


def goals_markdown(docs: Sequence[dict]) -> str:
    """The goals against the figures, per scenario and planner policy: met or missed, with the numbers."""
    lines = [f"Goals: correct verdicts >= {GOALS['ratio']}x the best FIFO by hand, <= {GOALS['wrong_per_session']} "
             f"wrong verdicts a session, GPU busy >= {100 * GOALS['busy']:.0f}% until the last admissible chain, "
             "0 idle minutes while an action fits."]
    for d in docs:
        pol, eff = d["policies"], ", ".join(f"{e:+g}" for e in d["setup"]["effects"])
        best = d.get("best_fifo_by_hand")
        lines.append(f"- effects {eff} (best FIFO by hand: {best}, "
                     f"{pol[best]['correct']['mean']:.3f} correct a session):" if best else f"- effects {eff}:")
        for n, r in pol.items():
            if POLICIES.get(n, ("hand",))[0] != "planner":
                continue
            ratio = d.get("ratio_correct_vs_best_fifo", {}).get(n)
            checks = [
                ("vs best FIFO", ratio is not None and ratio >= GOALS["ratio"], "-" if ratio is None else f"{ratio:.2f}x"),
                ("wrong / session", r["wrong_per_session"] <= GOALS["wrong_per_session"], f"{r['wrong_per_session']:.3f}"),
                ("busy", r["gpu_busy_frac_until_idle"]["mean"] >= GOALS["busy"],
                 f"{100 * r['gpu_busy_frac_until_idle']['mean']:.1f}%"),
                ("idle min", r["idle_min_while_action_fits"]["mean"] <= GOALS["idle_min"],
                 f"{r['idle_min_while_action_fits']['mean']:.2f}"),
            ]
            lines.append(f"  - {n}: " + "; ".join(f"{what} {val} {'met' if ok else 'MISSED'}" for what, ok, val in checks)
                         + f"; baseline share {100 * r['baseline_share']['mean']:.0f}%"
                         + f"; submission's true gain {r['submission_gain']['mean']:+.2f}")
    return "\n".join(lines)


def write_results(docs, out_dir: Path | str, notes: str = "") -> tuple[Path, Path]:
    """simulate.json (one scenario, or {"scenarios": [...]}) and simulate.md (their tables)."""
    docs = [docs] if isinstance(docs, dict) else list(docs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    j, m = out / "simulate.json", out / "simulate.md"
    plain = [{k: v for k, v in d.items() if k != "markdown"} for d in docs]
    j.write_text(json.dumps(plain[0] if len(plain) == 1 else {"scenarios": plain}, indent=2) + "\n")
    m.write_text("\n\n".join(d["markdown"] for d in docs) + "\n\n" + goals_markdown(docs)
                 + ("\n\n" + notes if notes else "") + "\n")
    return j, m

