"""The measured parts -> the results file: train shares, the eval model (fit, validation,
prediction at real lengths), start-ups, and chains per 6 hours for each layout.

Measured and predicted figures sit under separate keys: `train.*` and `eval.measured` are
measurements; `eval.model` is the fit; `eval.validation` compares the model with held-out
measured runs; `eval.predicted` and everything derived from it (`layouts`, `chains_per_6h`)
is a prediction from measured inputs.
"""

from __future__ import annotations

import re
import statistics
import time

from throughput import eval_model as em
from throughput.layouts import LayoutDurations, Startups, TrainShare, interpolate_share, layout_durations

VALIDATION_TOLERANCE = 0.10  # |predicted - measured| / measured, on each held-out scaled run
DRAWS = 8  # length draws the real-length prediction averages over
GPUS_PER_CHAIN = (1, 2, 4)
SHARE_LAYOUT = {4: "4x2-share", 2: "4x4-share", 1: "1x4x8"}  # gpus_per_chain -> the layout measuring its share
MAX_SEQS_WHAT_IF = (16, 32, 64, 128)


def gpu_slug(name: str | None, smoke: bool) -> str:
    if smoke or not name:
        return "cpu-smoke"
    m = re.search(r"(H200|H100|A100|L40S|L4|A10G|B200|GB200)", name)
    return (m.group(1) if m else name).replace(" ", "").lower()


def share_of(part: dict) -> TrainShare | None:
    r = part["ranks"][0] if part.get("ranks") else {}
    st = r.get("steady")
    if not part.get("ok") or not st:
        return None
    return TrainShare(part["rows_per_step_per_process"], st["step_s_median"], r["first_step_s"],
                      st["rollout_s_mean"], st["train_s_mean"], "measured")


def train_section(parts: dict) -> dict:
    out = {}
    for name, part in parts.items():
        if not name.startswith("train_"):
            continue
        layout = part["layout"]
        ranks = part.get("ranks", [])
        rows = part["rows_per_step_per_process"]
        entry = {"ok": part.get("ok"), "failure": part.get("failure"), "note": part.get("note"),
                 "processes": part["processes"], "per_device": part["per_device"], "accum": part["accum"],
                 "steps": part["steps"], "cache": part.get("cache"),
                 "ranks": [{k: r.get(k) for k in ("steady", "first_step_s", "peak_memory_mib", "startup", "exit_s",
                                                  "host", "steps_done")} for r in ranks],
                 "gpu_memory": part.get("gpu_memory"), "host_total_stepping": part.get("host_total_stepping")}
        st = ranks[0].get("steady") if ranks else None
        if part["processes"] > 1:
            conc = part.get("concurrent") or {}
            entry["concurrent"] = conc
            entry["gpu_seconds_per_32_rows"] = conc.get("seconds_per_32_rows")
        elif st:
            entry["gpu_seconds_per_32_rows"] = round(st["step_s_median"] * 32 / rows, 3)
        out[layout] = entry
    return out


def startups(parts: dict, eval_cal: dict | None, eval_val: dict | None) -> tuple[dict, Startups | None]:
    """Cold and warm start-ups per stage, as measured, and the warm ones the chains pay."""
    train = {"cold": [], "warm": []}
    exits = []
    for name, part in parts.items():
        if name.startswith("train_") and part.get("processes") == 1 and part.get("ranks"):
            r = part["ranks"][0]
            if r.get("startup"):
                train[part.get("cache", "warm")].append(r["startup"]["process_to_ready_s"])
            if r.get("exit_s") is not None:
                exits.append(r["exit_s"])
    evals = {"cold": [], "warm": []}
    for part in (eval_cal, eval_val):
        if part and part.get("startup") and (part["startup"].get("backend") or {}).get("vllm_engine") is not None:
            evals[part.get("cache", "warm")].append(part["startup"]["backend"]["vllm_engine"])
        elif part and part.get("startup") and part["startup"].get("process_to_engine_ready_s") is not None:
            s = part["startup"]
            evals[part.get("cache", "warm")].append(round(s["process_to_engine_ready_s"] - (s["process_to_imports_s"] or 0), 2))
    doc = {"train_process_to_ready_s": train, "train_exit_s": exits, "eval_engine_start_s": evals,
           "note": "train: process start -> trainer and rollout engine ready; eval: the engine's start alone (a "
                   "pre-started evaluator has its imports done when the go comes); cold = empty vLLM compile "
                   "cache, the first start of that engine on the host"}
    t_warm = min(train["warm"]) if train["warm"] else (min(train["cold"]) if train["cold"] else None)
    e_warm = min(evals["warm"]) if evals["warm"] else (min(evals["cold"]) if evals["cold"] else None)
    if t_warm is None or e_warm is None:
        return doc, None
    cold_extra = max(0.0, (max(train["cold"]) - t_warm) if train["cold"] else 0.0) + \
        max(0.0, (max(evals["cold"]) - e_warm) if evals["cold"] else 0.0)
    doc["used"] = {"train_ready_s": t_warm, "train_exit_s": statistics.median(exits) if exits else 0.0,
                   "eval_ready_s": e_warm, "cold_extra_s": round(cold_extra, 1),
                   "warm_measured": {"train": bool(train["warm"]), "eval": bool(evals["warm"])}}
    return doc, Startups(t_warm, statistics.median(exits) if exits else 0.0, e_warm, cold_extra)


def _trace(doc: dict | None) -> em.StepTrace | None:
    return em.StepTrace.from_json(doc) if doc and doc.get("steps") else None


def _workload(part: dict, lengths: dict, share=None) -> em.Workload:
    return em.plan_workload(part["problem_ids"], part["k"], part["seed"], part["prompt_tokens"], lengths,
                            part.get("proxy"), share=share)


def _spec(part: dict) -> em.EngineSpec:
    e = part["engine"]
    if not e.get("kv_blocks"):
        raise ValueError(f"{part['part']}: the engine's KV blocks were not found in its config or log")
    return em.EngineSpec(e["max_seqs"], e["kv_blocks"], e["block_size"], e.get("token_budget") or 8192)


def _check(work: em.Workload, spec: em.EngineSpec, cost: em.StepCost, run: dict) -> dict:
    """A measured run against the model: the wall of a finished run, the tokens of a cut one."""
    trace = _trace(run["trace"])
    out = {"measured_wall_s": run["wall_s"], "complete": run["complete"], "measured_steps": run["trace"]["steps"],
           "measured_preemptions": run["trace"]["preemptions"], "measured_tokens": run["trace"]["tokens"]}
    if trace is not None:
        out["cost_only"] = {"measured_step_seconds": run["trace"]["seconds_total"],
                            "model_on_measured_steps": round(em.trace_seconds(cost, trace), 3)}
    if run["complete"]:
        sim = em.simulate(work, spec, cost)
        out.update(predicted_wall_s=round(sim.wall_s, 3), error=round(sim.wall_s / run["wall_s"] - 1, 4),
                   predicted_steps=sim.engines[0].steps, predicted_preemptions=sim.engines[0].preemptions)
    else:
        sim = em.simulate(work, spec, cost, until_s=run["wall_s"])
        out.update(predicted_tokens=sim.tokens, error=round(sim.tokens / max(1, run["trace"]["tokens"]) - 1, 4),
                   note="cut short: tokens generated by the measured time, predicted vs measured")
    return out


def eval_section(cal: dict | None, val: dict | None, law: em.LengthLaw, draws: int = DRAWS) -> dict:
    if not cal or not cal.get("ok"):
        return {"error": "no eval_calibrate part"}
    traces = [t for t in (_trace((cal.get("sweep") or {}).get("trace")), _trace(cal["runs"]["real"]["trace"])) if t]
    cost = em.fit_step_cost(traces)
    real_run = cal["runs"]["real"]
    loop_s = max(0.0, (real_run["wall_s"] - real_run["trace"]["seconds_total"]) / max(1, real_run["trace"]["steps"]))
    cost = em.StepCost(cost.base + loop_s, cost.per_seq, cost.per_ctx, cost.per_gen, cost.per_prefill, cost.per_pair)
    sweep_only = em.fit_step_cost(traces[:1]) if len(traces) == 2 else None
    model = {"step_cost": cost.to_json(), "loop_overhead_s_per_step": round(loop_s, 6),
             "fitted_on": ["sweep", "real"][-len(traces):],
             "steps_fitted": sum(len(t) for t in traces)}
    spec_cal = _spec(cal)
    real_lengths = {(pid, s): n for pid, s, n in cal["lengths"]}
    measured = {"real_lengths_first_s": {"seconds": real_run["wall_s"], "tokens": real_run["trace"]["tokens"],
                                         "tokens_per_s": round(real_run["trace"]["tokens"] / real_run["wall_s"], 1),
                                         "samples_done": real_run["samples_done"]},
                "engine_calibrate": cal["engine"]}
    validation = {"tolerance": VALIDATION_TOLERANCE,
                  "real_lengths_cut_short": _check(_workload(cal, real_lengths), spec_cal, cost, real_run)}
    if sweep_only is not None:
        validation["real_lengths_cut_short"]["sweep_only_fit_on_its_steps"] = round(
            em.trace_seconds(sweep_only, traces[1]), 3)
    if val and val.get("ok"):
        spec_val = _spec(val)
        scaled = {(pid, s): n for pid, s, n in val["lengths"]}
        validation["scale"] = val.get("scale")
        validation["engine_validate"] = val["engine"]
        for name, share in (("share", (0, 4)), ("full", None)):
            run = val["runs"].get(name)
            if run:
                validation[f"scaled_{name}"] = _check(_workload(val, scaled, share), spec_val, cost, run)
                measured[f"scaled_{name}"] = {"wall_s": run["wall_s"], "complete": run["complete"],
                                              "samples": run["samples_done"], "tokens": run["trace"]["tokens"]}
        errors = [validation[k]["error"] for k in ("scaled_share", "scaled_full") if k in validation]
        validation["validated"] = bool(errors) and all(abs(e) <= VALIDATION_TOLERANCE for e in errors)
    else:
        validation["validated"] = False
        validation["note"] = "no eval_validate part: the model is not checked on held-out runs"
    predicted = predict(cal, spec_cal, cost, law, draws)
    return {"measured": measured, "model": model, "validation": validation, "predicted": predicted}


def predict(cal: dict, spec: em.EngineSpec, cost: em.StepCost, law: em.LengthLaw, draws: int) -> dict:
    """Generation seconds of the whole evaluation on 1, 2 and 4 engines at real lengths, averaged
    over length draws; and the one-engine evaluation with other sequence caps (what-if)."""
    ids = cal["problem_ids"]
    walls: dict[int, list[float]] = {g: [] for g in GPUS_PER_CHAIN}
    caps: dict[int, list[float]] = {m: [] for m in MAX_SEQS_WHAT_IF}
    per_engine_share = []
    for d in range(draws):
        lengths = em.draw_lengths(law, ids, cal["k"], cal["seed"] + d)
        work = _workload(cal, lengths)
        for g in GPUS_PER_CHAIN:
            sim = em.simulate(work, spec, cost, engines=g)
            walls[g].append(sim.wall_s)
            if g == 4:
                per_engine_share.append(statistics.fmean(e.end_s for e in sim.engines))
        for m in MAX_SEQS_WHAT_IF:
            other = em.EngineSpec(m, spec.kv_blocks, spec.block_size, spec.token_budget)
            caps[m].append(em.simulate(work, other, cost).wall_s)

    def stats(xs):
        return {"mean_s": round(statistics.fmean(xs), 1), "sd_s": round(statistics.stdev(xs), 1) if len(xs) > 1 else 0.0}

    by_gpus = {str(g): {**stats(w), "gpu_minutes": round(g * statistics.fmean(w) / 60, 2)} for g, w in walls.items()}
    one, four = statistics.fmean(walls[1]), statistics.fmean(walls[4])
    return {"law": law.__dict__, "draws": draws, "engine": {"max_seqs": spec.max_seqs, "kv_tokens": spec.kv_tokens},
            "generation_by_gpus": by_gpus,
            "full_eval_one_gpu_minutes": round(one / 60, 2),
            "four_gpu_eval_one_share_minutes": round(four / 60, 2),
            "four_gpu_eval_gpu_minutes": round(4 * four / 60, 2),
            "four_gpu_engines_mean_busy_minutes": round(statistics.fmean(per_engine_share) / 60, 2),
            "one_gpu_over_four_gpu_share_gpu_minutes": round(one / (4 * four), 3),
            "max_seqs_what_if_one_gpu": {str(m): stats(w) for m, w in caps.items()}}


def combine(parts: dict[str, dict], law: em.LengthLaw = em.REAL_LAW, draws: int = DRAWS) -> dict:
    """The results document from the parts, by name (train_<layout>, eval_calibrate, eval_validate)."""
    cal, val = parts.get("eval_calibrate"), parts.get("eval_validate")
    smoke = any(p.get("smoke") for p in parts.values())
    name = next((r.get("gpu") for p in parts.values() for r in p.get("ranks", []) if r.get("gpu")), None) \
        or next((p.get("gpu") for p in parts.values() if p.get("gpu")), None)
    train = train_section(parts)
    if smoke:
        law = em.LengthLaw(**cal["law"]) if cal else law
    evals = eval_section(cal, val, law, draws)
    start_doc, starts = startups(parts, cal, val)
    shares = {g: share_of(parts[f"train_{layout}"]) for g, layout in SHARE_LAYOUT.items() if f"train_{layout}" in parts}
    shares = {g: v for g, v in shares.items() if v is not None}
    global_batch = shares[1].rows if 1 in shares else 32  # 32; the smoke run's smaller per-device batch gives 16
    if 2 not in shares and 4 in shares and 1 in shares:
        shares[2] = interpolate_share(global_batch // 2, shares[4], shares[1])
    layouts: list[LayoutDurations] = []
    missing = []
    pred = evals.get("predicted", {}).get("generation_by_gpus", {})
    source = "predicted (model validated on scaled runs)" if evals.get("validation", {}).get("validated") else \
        "predicted (model NOT validated: see eval.validation)"
    for g in GPUS_PER_CHAIN:
        if g not in shares or str(g) not in pred or starts is None:
            missing.append(g)
            continue
        layouts.append(layout_durations(g, shares[g], pred[str(g)]["mean_s"], starts, source, global_batch=global_batch))
    today = next((x for x in layouts if x.gpus_per_chain == 4), None)
    return {
        "benchmark": "gpu_throughput", "gpu": gpu_slug(name, smoke), "gpu_name": name, "smoke": smoke,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "chains_per_6h": {str(x.gpus_per_chain): x.chains_per_6h for x in layouts},
        "chains_per_6h_vs_one_chain_at_a_time": {str(x.gpus_per_chain): round(x.chains_per_6h / today.chains_per_6h, 2)
                                                 for x in layouts} if today and today.chains_per_6h else None,
        "layouts": [x.to_json() for x in layouts], "layouts_missing": missing,
        "train": train, "train_shares_by_gpus_per_chain": {str(k): v.__dict__ for k, v in sorted(shares.items())},
        "eval": evals, "startup": start_doc, "host_per_chain": host_needs(parts),
        "notes": [
            "train figures are measured (one GPU; the 4- and 2-GPU layouts as one rank's share, without the all-reduce "
            "of ~70M LoRA gradients between ranks); the 2-GPU share, unless measured, is interpolated (train_shares_by_gpus_per_chain.*.source)",
            "eval: measured at real lengths for a bounded time and at lengths / scale to completion; the real-length "
            "evaluations of 1, 2 and 4 GPUs are predicted by the model validated on the scaled runs",
            "random-init Qwen3-1.7B shapes; completions forced to their lengths (1,024 tokens in training; the eval "
            "lengths drawn from eval.predicted.law)"],
    }


def host_needs(parts: dict) -> dict:
    """Host RAM (PSS, else RSS) and cores of one chain's processes, by layout, as measured."""
    out = {}
    for name, part in parts.items():
        if not name.startswith("train_"):
            continue
        tot = part.get("host_total_stepping") or {}
        ram = tot.get("peak_pss_mib") or tot.get("peak_rss_mib")
        out[part["layout"]] = {"ram_mib_all_processes": ram, "mean_cores_all_processes": tot.get("mean_cores"),
                               "processes": part["processes"]}
    for name in ("eval_calibrate", "eval_validate"):
        h = (parts.get(name) or {}).get("host") or {}
        if h:
            out[name] = {"ram_mib": h.get("peak_pss_mib") or h.get("peak_rss_mib"), "mean_cores": h.get("mean_cores")}
    return out
