"""The comparison report: candidates ranked against the baseline and the noise floor (issue 3).

`build_report` turns plain run records into the `opsdctl compare --json` dict (no store
access); `render_compare` prints it with rich. The maths live in opsdctl.stats.inference.

Rules (issue 3):
- Full vs partial: a run is partial when the evaluator said so, or k < full_k, or
  n_problems < full_n (full_k / full_n default to the largest k / n among runs not flagged
  partial). Partial runs are never pooled: they are listed apart (`"partial": true`), with
  their mean and eval-sampling SE only (no delta, P(beat) or verdict: other problems/samples).
- Baseline: the full store runs of `baseline` when it has any; otherwise the reference
  (mean, n) stands in.
- Noise: pooled s^2 over the baseline's and every shown candidate's full runs, with the
  reference as prior (s0 = sd, nu0 = n - 1) unless `prior = false` or there is no reference.
  When nu == 0 there is no t: `noise.note` and each variant's `note` say
  "not enough runs to estimate noise"; se, CI and p_beat are null and the verdict `undecided`.
- Verdicts: Bonferroni over the m candidates that have full runs.
- Runs needed: `runs_needed` extra candidate runs (null for delta <= 0, a settled verdict,
  or unknown noise). When candidate runs alone can never settle it, `runs_needed` is null,
  `needs_baseline_runs` is true, and `runs_needed_both_arms` says how many runs to add to
  each arm. With chain_minutes (and minutes_left) given: `minutes_needed` (and `fits`).

JSON (points; variances in points^2):
  baseline: name, source ("runs" | "reference" | null), n, mean, sd, se_mean, mean_ci_low/high,
            runs, chain_ids, reference
  noise:    s, nu, tau2, v_eval, s0, nu0, eval_dominates, runs_with_counts, runs_without_counts,
            note ("not enough runs to estimate noise" | null), v_eval_note, advice
  bonferroni: m, alpha, better_at, worse_at;  design: [{effect, power, runs_per_arm, chains,
            minutes, fits}];  budget: chain_minutes, minutes_left;  full_k, full_n, notes
  variants: name, n, mean, sd, se (of delta), delta, ci_low, ci_high (of delta), p_beat, verdict,
            runs_needed, needs_baseline_runs, runs_needed_both_arms, minutes_needed, fits, partial,
            se_mean, mean_ci_low/high, paired_delta, paired_se, paired_problems, v_eval, k,
            n_problems, runs, chain_ids, note   (partial entries: se_eval instead of the tests)
Every value in the report is a plain JSON type; no NaN (null instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from opsdctl.config import Reference  # noqa: F401  (re-exported: the published baseline)
from opsdctl.stats import inference


@dataclass(frozen=True)
class RunRecord:
    """One finished evaluation of one chain."""

    variant: str  # display name ("token-clip", "token-clip@v2")
    chain_id: int
    score: float  # avg@k in points, 0-100
    k: int  # samples per problem
    n_problems: int
    counts: tuple[int, ...] | None  # per-problem correct counts (None: external FINAL line only)
    problem_ids: tuple[str, ...] | None  # aligned with counts
    partial: bool  # queued --partial, or the evaluator said so
    # The candidate it counts for (opsdctl.stats.candidates: knob hash x code tree x commands),
    # labelled e.g. "token-clip @3f2a1c"; None: the variant label alone.
    candidate: str | None = None
    code: str | None = None  # short id of the code tree its checkpoint was trained with
    train_id: int | None = None  # the chain that trained the checkpoint (itself, unless eval-only)
    kind: str = "recipe"  # the variant's kind: recipe | base | checkpoint

    @property
    def key(self) -> str:
        """What compare groups runs by: the candidate."""
        return self.candidate or self.variant


def _f(x) -> float | None:
    """A plain float for JSON, or None for missing / non-finite values."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _sd(ys: list[float]) -> float | None:
    if len(ys) < 2:
        return None
    mu = sum(ys) / len(ys)
    return math.sqrt(sum((y - mu) ** 2 for y in ys) / (len(ys) - 1))


def _check(run: RunRecord) -> None:
    if not math.isfinite(run.score):
        raise ValueError(f"chain {run.chain_id}: score is not a finite number")
    if run.counts is not None and len(run.counts) != run.n_problems:
        raise ValueError(f"chain {run.chain_id}: {len(run.counts)} counts for {run.n_problems} problems")
    if run.problem_ids is not None and run.counts is not None and len(run.problem_ids) != len(run.counts):
        raise ValueError(f"chain {run.chain_id}: problem_ids and counts differ in length")


def is_partial(run: RunRecord, full_k: int | None, full_n: int | None) -> bool:
    """Partial: flagged by the evaluator, or fewer samples or problems than the full setting."""
    return bool(
        run.partial or (full_k is not None and run.k < full_k) or (full_n is not None and run.n_problems < full_n)
    )


def _v(run: RunRecord) -> float | None:
    """Eval-sampling variance V_r of a run, None without counts (or with k < 2)."""
    if run.counts is None or run.k < 2:
        return None
    return inference.eval_variance(run.counts, run.k)


def _mean_v(runs: list[RunRecord]) -> float | None:
    """Mean eval-sampling variance V_r over the runs that have per-problem counts."""
    vv = [x for x in (_v(r) for r in runs) if x is not None]
    return sum(vv) / len(vv) if vv else None


def _entry_head(name: str, runs: list[RunRecord]) -> dict:
    """The keys every variant entry starts with; the tests against the baseline start empty."""
    ys = [r.score for r in runs]
    return {"name": name, "variants": list(dict.fromkeys(r.variant for r in runs)), "code": runs[0].code,
            "n": len(ys), "mean": _f(sum(ys) / len(ys)), "sd": _f(_sd(ys)), "se": None,
            "delta": None, "ci_low": None, "ci_high": None, "p_beat": None, "verdict": None, "runs_needed": None}


def _entry_runs(runs: list[RunRecord]) -> dict:
    return {"runs": [_f(r.score) for r in runs], "chain_ids": [r.chain_id for r in runs]}


def _fractions(runs: Iterable[RunRecord]) -> list[dict[str, float]]:
    """Per-run {problem id: c_i / k}; positions stand in for missing ids."""
    out = []
    for r in runs:
        if r.counts is None:
            continue
        ids = r.problem_ids if r.problem_ids is not None else tuple(f"#{i}" for i in range(len(r.counts)))
        out.append({pid: c / r.k for pid, c in zip(ids, r.counts)})
    return out


def _paired(cand: list[RunRecord], base: list[RunRecord]) -> inference.PairedSE | None:
    """Paired by-problem SE on the problems every counted run of both arms has."""
    fv, fb = _fractions(cand), _fractions(base)
    if not fv or not fb:
        return None
    common = set(fv[0])
    for d in fv[1:] + fb:
        common &= set(d)
    ids = [pid for pid in fv[0] if pid in common]  # keep the evaluator's order
    if len(ids) < 2:
        return None
    return inference.paired_problem_se([[d[p] for p in ids] for d in fv], [[d[p] for p in ids] for d in fb])


def _minutes(chains: int | None, chain_minutes: float | None, minutes_left: float | None):
    """(minutes for `chains` sequential chains, whether they fit in minutes_left)."""
    if chains is None or chain_minutes is None:
        return None, None
    need = chains * chain_minutes
    return _f(need), (None if minutes_left is None else bool(need <= minutes_left))


def build_report(
    runs: list[RunRecord],
    *,
    baseline: str | None,
    reference: Reference | None,
    variants: list[str] | None = None,
    full_k: int | None = None,
    full_n: int | None = None,
    chain_minutes: float | None = None,
    minutes_left: float | None = None,
) -> dict:
    """The whole comparison as a JSON-ready dict (see the module docstring for the rules).

    Shape: {"baseline": {...}, "noise": {"s", "nu", "tau2", "v_eval", ...},
    "bonferroni": {...}, "design": [...], "budget": {...}, "notes": [...],
    "variants": [full candidates sorted by P(beat), then partial entries]}.
    """
    for r in runs:
        _check(r)
    flagged_full = [r for r in runs if not r.partial]
    if full_k is None:
        full_k = max((r.k for r in flagged_full), default=None)
    if full_n is None:
        full_n = max((r.n_problems for r in flagged_full), default=None)
    full: dict[str, list[RunRecord]] = {}
    part: dict[tuple[str, int, int], list[RunRecord]] = {}
    for r in runs:
        if is_partial(r, full_k, full_n):
            part.setdefault((r.key, r.k, r.n_problems), []).append(r)
        else:
            full.setdefault(r.key, []).append(r)

    names = list(dict.fromkeys(variants)) if variants else list(dict.fromkeys(r.key for r in runs))
    candidates = [v for v in names if v != baseline]
    notes: list[str] = []

    # -- the baseline: store runs when any, else the reference
    base_runs = full.get(baseline, []) if baseline is not None else []
    if base_runs:
        b_source, b_scores = "runs", [r.score for r in base_runs]
        b_mean, b_n, b_sd = sum(b_scores) / len(b_scores), len(b_scores), _sd(b_scores)
    elif reference is not None:
        b_source, b_scores = "reference", []
        b_mean, b_n, b_sd = float(reference.mean), int(reference.n), float(reference.sd)
    else:
        b_source, b_scores, b_mean, b_n, b_sd = None, [], None, 0, None
        notes.append("no baseline: no full runs of the baseline variant and no reference; deltas cannot be computed")

    # -- pooled noise over the baseline and every shown candidate with full runs
    s0, nu0 = (None, 0) if reference is None else inference.prior_from_reference(reference.sd, reference.n, reference.prior)
    shown = [v for v in candidates if full.get(v)]
    pooled_runs = base_runs + [r for v in shown for r in full[v]]
    groups = [b_scores] + [[r.score for r in full[v]] for v in shown]
    s2, nu = inference.pooled_variance(groups, s0, nu0)
    s = math.sqrt(s2) if s2 is not None else None
    v_runs = [v for v in (_v(r) for r in pooled_runs) if v is not None]
    n_no_counts = sum(1 for r in pooled_runs if r.counts is None)
    split = inference.noise_split(s2, v_runs)
    noise_note = inference.NOT_ENOUGH_RUNS if s is None else None
    advice = None
    if split.eval_dominates:
        advice = (
            "eval sampling dominates the run-to-run noise: more samples per problem would cut noise "
            "more cheaply than re-training"
        )
    noise = {
        "s": _f(s),
        "nu": nu,
        "tau2": _f(split.tau2),
        "v_eval": _f(split.v_eval),
        "s0": _f(s0),
        "nu0": nu0,
        "eval_dominates": split.eval_dominates,
        "runs_with_counts": len(v_runs),
        "runs_without_counts": n_no_counts,
        "note": noise_note,
        "v_eval_note": (f"{n_no_counts} run(s) without per-problem counts: no V_r, left out of mean V_r"
                        if n_no_counts else None),
        "advice": advice,
    }

    # -- candidates with full runs
    has_base = b_mean is not None
    m = len(shown) if has_base else 0
    entries = []
    for v in shown:
        vr = full[v]
        ys = [r.score for r in vr]
        n_v, mean_v = len(ys), sum(ys) / len(ys)
        se_m, lo_m, hi_m = inference.mean_interval(mean_v, n_v, s, nu)
        mean_vr = _mean_v(vr)
        e = {
            **_entry_head(v, vr),
            "needs_baseline_runs": False,
            "runs_needed_both_arms": None,
            "minutes_needed": None,
            "fits": None,
            "partial": False,
            "se_mean": _f(se_m),
            "mean_ci_low": _f(lo_m),
            "mean_ci_high": _f(hi_m),
            "paired_delta": None,
            "paired_se": None,
            "paired_problems": None,
            "v_eval": _f(mean_vr),
            "k": vr[0].k,
            "n_problems": vr[0].n_problems,
            **_entry_runs(vr),
            "note": noise_note,
        }
        if has_base:
            d = inference.compare_means(mean_v, n_v, b_mean, b_n, s, nu)
            e.update(delta=_f(d.delta), se=_f(d.se), ci_low=_f(d.ci_low), ci_high=_f(d.ci_high), p_beat=_f(d.p_beat))
            e["verdict"] = inference.verdict(d.p_beat, m)
            rn = inference.runs_needed(d.delta, s, n_v, b_n, nu, m, reference=b_source == "reference")
            e.update(
                runs_needed=rn.extra,
                needs_baseline_runs=rn.needs_baseline_runs,
                runs_needed_both_arms=rn.extra_both_arms,
            )
            chains = rn.extra if rn.extra is not None else (2 * rn.extra_both_arms if rn.extra_both_arms else None)
            e["minutes_needed"], e["fits"] = _minutes(chains, chain_minutes, minutes_left)
            ps = _paired(vr, base_runs) if base_runs else None
            if ps is not None:
                e.update(paired_delta=_f(ps.delta), paired_se=_f(ps.se), paired_problems=ps.n_problems)
        entries.append(e)

    def rank(e):  # P(beat) first; without it (nu == 0 / no baseline) by delta, then mean
        p, d = e["p_beat"], e["delta"]
        return (p is None, -(p or 0.0), -(d if d is not None else 0.0), -(e["mean"] or 0.0))

    entries.sort(key=rank)

    # -- requested candidates without any run, then partial evaluations apart
    for v in candidates:
        if not full.get(v) and not any(key[0] == v for key in part):
            entries.append({"name": v, "n": 0, "partial": False, "verdict": None, "note": "no runs"})
    for (v, k, n_p), pr in part.items():
        if variants and v not in names and v != baseline:
            continue
        mean_vr = _mean_v(pr)
        se_eval = math.sqrt(mean_vr / len(pr)) if mean_vr is not None else None
        entries.append(
            {
                **_entry_head(v, pr),
                "partial": True,
                "k": k,
                "n_problems": n_p,
                "se_eval": _f(se_eval),
                **_entry_runs(pr),
                "note": f"partial evaluation ({n_p} problems x {k} samples): not pooled, not comparable",
            }
        )

    # -- baseline entry
    b_se, b_lo, b_hi = inference.mean_interval(b_mean, b_n, s, nu) if has_base else (None, None, None)
    base = {
        "name": baseline,
        "source": b_source,
        "n": b_n,
        "mean": _f(b_mean),
        "sd": _f(b_sd),
        "se_mean": _f(b_se),
        "mean_ci_low": _f(b_lo),
        "mean_ci_high": _f(b_hi),
        "runs": [_f(y) for y in b_scores],
        "chain_ids": [r.chain_id for r in base_runs],
        "reference": None
        if reference is None
        else {"mean": _f(reference.mean), "sd": _f(reference.sd), "n": reference.n, "prior": reference.prior},
    }

    # -- design figure: runs per arm to detect 2 and 3 points with 80% power
    design = []
    for eff in inference.DESIGN_EFFECTS:
        n_arm = inference.design_runs_per_arm(eff, s, nu0, max(m, 1))
        # a new candidate needs n_arm chains; the baseline arm needs what it lacks (all n_arm of
        # them against the reference: its first local run replaces the reference's n)
        lacks = None if n_arm is None else (n_arm if b_source != "runs" else max(0, n_arm - b_n))
        chains = None if n_arm is None else n_arm + lacks
        mins, fits = _minutes(chains, chain_minutes, minutes_left)
        design.append({"effect": eff, "power": inference.DESIGN_POWER, "runs_per_arm": n_arm, "chains": chains,
                       "minutes": mins, "fits": fits})

    return {
        "baseline": base,
        "noise": noise,
        "bonferroni": {
            "m": m,
            "alpha": inference.ALPHA,
            "better_at": _f(inference.bonferroni_level(m)) if m else None,
            "worse_at": _f(inference.ALPHA / m) if m else None,
        },
        "design": design,
        "budget": {"chain_minutes": _f(chain_minutes), "minutes_left": _f(minutes_left)},
        "full_k": full_k,
        "full_n": full_n,
        "notes": notes,
        "variants": entries,
    }


# ---------------------------------------------------------------- rendering

_VERDICT_STYLE = {"better": "bold green", "worse": "red", "undecided": "yellow"}


def _pt(x, fmt="{:.2f}", signed=False) -> str:
    if x is None:
        return "-"
    return ("{:+.2f}" if signed else fmt).format(x)


def _min(minutes: float) -> str:
    """Minutes for humans: tiny-profile chains take seconds, real ones tens of minutes."""
    return f"{minutes * 60:.0f} s" if minutes < 1 else f"{minutes:.0f} min"


def _next_cell(e: dict, with_time: bool = False) -> str:
    """What to run next for one candidate (with its time and fit when asked and known)."""
    if e.get("runs_needed") is not None:
        text = f"+{e['runs_needed']} run" + ("s" if e["runs_needed"] > 1 else "")
    elif e.get("needs_baseline_runs"):
        both = e.get("runs_needed_both_arms")
        text = "baseline too" + (f": +{both} each" if both else ": out of reach")
    elif e.get("verdict") in ("better", "worse"):
        return "settled"
    else:
        return "-"
    if with_time and e.get("minutes_needed") is not None:
        text += f" ({_min(e['minutes_needed'])}" + ("" if e.get("fits") is None else
                                                    (", fits" if e["fits"] else ", does not fit")) + ")"
    return text


def render_compare(report: dict, console) -> None:
    """Print the report: the table (baseline on top, candidates by P(beat)), then the
    Bonferroni note, the noise line, the runs-needed and design advice, and partial runs apart."""
    from rich.markup import escape
    from rich.table import Table

    b, nz = report["baseline"], report["noise"]
    full = [e for e in report["variants"] if not e.get("partial")]
    part = [e for e in report["variants"] if e.get("partial")]

    if b["source"] == "runs":
        title = f"Against baseline {escape(b['name'])} ({b['n']} run{'s' if b['n'] != 1 else ''} in the store)"
    elif b["source"] == "reference":
        title = f"Against the published reference {b['mean']:.2f} (n = {b['n']}; no store runs of the baseline)"
    else:
        title = "No baseline"
    paired = any(e.get("paired_se") is not None for e in full)  # the column only when it has values
    t = Table(title=title, title_justify="left")
    cols = [
        ("variant", "left"), ("runs", "right"), ("mean", "right"), ("sd", "right"), ("delta", "right"),
        ("95% CI of delta", "center"), ("P(beat)", "right"), ("verdict", "left"), ("next", "left"),
    ] + ([("by-problem SE", "right")] if paired else [])
    for col, justify in cols:
        t.add_column(col, justify=justify)
    blank = ["-"] * (len(cols) - 4)
    bname = escape(b["name"] or ("reference" if b["source"] == "reference" else ""))
    bname = bname if bname == "baseline" else f"{bname} (baseline)".strip()
    if b["source"] == "reference" and b["name"]:
        bname += " (reference)"
    t.add_row(bname, str(b["n"]), _pt(b["mean"]), _pt(b["sd"]), *blank, style="bold")
    t.add_section()
    for e in full:
        if e["n"] == 0:
            t.add_row(escape(e["name"]), "0", *["-"] * 6, "no runs", *(["-"] if paired else []))
            continue
        ci = "-" if e["ci_low"] is None else f"[{e['ci_low']:+.2f}, {e['ci_high']:+.2f}]"
        v = e["verdict"] or "-"
        row = [
            escape(e["name"]), str(e["n"]), _pt(e["mean"]), _pt(e["sd"]), _pt(e["delta"], signed=True), ci,
            "-" if e["p_beat"] is None else f"{e['p_beat']:.3f}",
            f"[{_VERDICT_STYLE.get(v, '')}]{v}[/]" if v in _VERDICT_STYLE else v,
            _next_cell(e),
        ]
        if paired:
            row.append("-" if e.get("paired_se") is None else f"±{e['paired_se']:.2f}")
        t.add_row(*row)
    console.print(t)

    bon = report["bonferroni"]
    if bon["m"]:
        console.print(
            f"Verdicts: one-sided, Bonferroni over m = {bon['m']} candidate{'s' if bon['m'] != 1 else ''}: "
            f"better if P(beat) >= {bon['better_at']:.4g}, worse if <= {bon['worse_at']:.4g}."
        )
    if nz["s"] is None:
        console.print(
            f"[bold red]Noise: {inference.NOT_ENOUGH_RUNS}[/] (no prior and only single runs): no P(beat) or "
            "verdicts. Repeat a variant, or give \\[baseline] reference = {mean, sd, n}."
        )
    else:
        prior = f"prior s0 = {nz['s0']:.2f} with {nz['nu0']} dof from the reference" if nz["nu0"] else "no prior"
        line = f"Noise: s = {nz['s']:.2f} points per run (nu = {nz['nu']}; {prior})."
        if nz["v_eval"] is not None:
            line += (
                f" Split: training tau^2 = {nz['tau2']:.2f} vs eval sampling mean V_r = {nz['v_eval']:.2f} "
                f"points^2 (V_r from {nz['runs_with_counts']} run{'s' if nz['runs_with_counts'] != 1 else ''}"
                + (f"; {nz['runs_without_counts']} without per-problem counts left out" if nz["runs_without_counts"]
                   else "") + ")."
            )
        else:
            line += " No per-problem counts: no split into training and eval-sampling noise."
        console.print(line)
        if nz["advice"]:
            console.print(f"[cyan]Advice: {nz['advice']}.[/]")

    bud = report["budget"]
    for e in full:
        if e.get("n") and (e.get("runs_needed") is not None or e.get("needs_baseline_runs")):
            console.print(f"Next: {escape(e['name'])}: {_next_cell(e, with_time=True)}" + (
                "" if bud["minutes_left"] is None else f" with {bud['minutes_left']:.0f} min left") + ".")
    parts = []
    for d in report["design"]:
        if d["runs_per_arm"] is None:
            continue
        txt = f"+{d['effect']:g} points: {d['runs_per_arm']} runs per arm"
        if d["minutes"] is not None:
            txt += f" (a new candidate: {d['chains']} chains with the baseline's top-up, {_min(d['minutes'])}" + (
                "" if d["fits"] is None else (", fits" if d["fits"] else ", does not fit")) + ")"
        parts.append(txt)
    if parts:
        console.print("Design (80% power at the verdict's level): " + "; ".join(parts) + ".")
    if paired:
        console.print(
            "by-problem SE: paired over problems on run-averaged p_i; uncertainty about generalizing "
            "beyond these problems, not run-to-run noise."
        )
    for n in report["notes"]:
        console.print(f"Note: {escape(n)}.")

    if part:
        console.print("Partial evaluations: fewer problems or samples than the full setting; never pooled, not comparable.")
        pt = Table()
        for col in ("variant", "problems x k", "runs", "mean", "eval SE"):
            pt.add_column(col, justify="left" if col == "variant" else "right")
        for e in part:
            pt.add_row(escape(e["name"]), f"{e['n_problems']} x {e['k']}", str(e["n"]), _pt(e["mean"]), _pt(e.get("se_eval")))
        console.print(pt)
