"""The comparison report: candidates ranked against the baseline and the noise floor.

`build_report` turns plain run records into the typed report (opsdctl.stats.report; its
`to_json()` is the `opsdctl compare --json` document; no store access), each part built by a small
function that calls the one rule of opsdctl.stats.inference; opsdctl.cli.compare_table prints it with rich. The maths live in opsdctl.stats.inference and
opsdctl.stats.sequential.

Rules:
- Full vs partial: a run is partial when the evaluator said so, or k < full_k, or
  n_problems < full_n (full_k / full_n default to the largest k / n among runs not flagged
  partial). Partial runs are never pooled and never give a verdict: they are listed apart
  ("partial: screening only") with their mean and their own, wider SE
  sqrt((tau^2 + mean V_r) / n) (training noise plus their eval-sampling noise).
- Noise: one s^2 pooled over the full runs of every variant in `runs` (whatever is shown),
  with the reference's sd as prior (s0 = sd, nu0 = n - 1) unless `prior = false`, weighted by
  how well the local scatter agrees with it (inference.prior_check: weight min(1, p / 0.5) of a
  one-sided F test; smooth, no drop at one look).
- Baseline: the published mean is one more measurement of the user's baseline, with a setup
  offset of sd `offset_sd` (default 1.0 point). Without local baseline runs it stands in with
  variance s^2/n_ref + offset_sd^2; with local runs it is combined with them by precision, the
  offset sd widened to the difference they show (inference.offset_sd_seen), so the published
  mean fades smoothly as the evidence of an offset grows.
- Forecast (the bet, opsdctl.stats.forecast): every arm's official 5-run mean, shrunk across the
  family; the verdicts stay the claim.
- Family: verdicts are Bonferroni-corrected over the m candidates of the family: every
  candidate with a run in `runs` (or those of the `family` variants given, plus the candidates
  shown). A candidate is a run's key (knobs x code tree, opsdctl.stats.candidates): a variant
  with another's knobs on the same code is that candidate, not one more.
- Looks: compare may be re-run after every run, so each verdict uses the nominal level of its
  look j = candidate runs + local baseline runs (opsdctl.stats.sequential: alpha spent over the
  looks), and no verdict is given before the local runs have MIN_LOCAL_DOF dof.
- Runs needed: extra candidate runs that would settle the verdict (`better` for delta > 0:
  `runs_needed`; `worse` for delta < 0: `runs_needed_worse`) if delta and s hold; when
  candidate runs alone never do, `needs_baseline_runs` and `runs_needed_both_arms`.

JSON (points; variances in points^2):
  baseline: name, source ("runs" | "runs+reference" | "reference" | null), n (local runs, or
            the reference's n), n_local, mean, sd, se_mean, mean_ci_low/high, runs, chain_ids, code,
            reference, offset_sd, reference_check {diff, se, ci_low, ci_high, p, significant},
            local_runs_would_buy [{runs, se_mean}]
  noise:    s, nu, nu_local, s_local, tau2, v_eval, s0, nu0 (as used), prior_check {chi2, p,
            level, kept, checked}, eval_dominates, runs_with_counts, runs_without_counts, note, advice
  alpha_spending: m, alpha, family, better_at/worse_at (at looks j_min..j_flat), looks {j_min, j_flat,
            growth, c};  screen: {problems, k, se, resolves} (a 15x4 screen against the baseline's
            partial: its SE and the effect it resolves at one-sided 5% with 80% power; null without
            a noise split);
  forecast_model: official_runs, spread (the slab's sd, points, posterior mean), spread_sd, spread_prior, train_var,
            eval_var, reference, offset_sd (the setup offset sd in use, widened), arms, interval, noise_var,
            noise_dof (the forecast's and the submission rule's estimate: stats.bet); null without noise
  budget: chain_minutes, minutes_left;  full_k, full_n, notes
  variants: name, n, mean, sd, se (of delta), delta, ci_low, ci_high (95%, of delta), p_beat,
            verdict, look, better_at, worse_at, runs_needed, runs_needed_worse,
            needs_baseline_runs, runs_needed_both_arms, minutes_needed, fits, partial, se_mean,
            mean_ci_low/high, paired_delta, paired_se, paired_problems, v_eval, k, n_problems,
            runs, chain_ids, note   (partial entries: se, se_eval, label, vs_baseline {delta, se,
            p_effect, baseline_runs} against the baseline's partial on the same problems; no tests)
  forecast (every entry, the baseline's too): {mean, low80, high80, p_above_reference, p_best, p_above_baseline}: the
            predictive distribution of the official 5-run mean (opsdctl.stats.forecast; all null for
            partial entries, entries without runs, and without a noise estimate)
Every value in the report is a plain JSON type; no NaN (null instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from opsdctl.config import Reference  # noqa: F401  (re-exported: the published baseline)
from opsdctl.stats import bet, forecast, inference, pooled_evals, sequential
from opsdctl.stats import report
from opsdctl.stats.screen import SCREEN, SCREEN_Z, screen_reading, screen_se

PARTIAL_LABEL = "partial: screening only"


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
    draw: int = 0  # which fresh draw of eval samples (0: the chain's own eval; a re-eval: 1, 2, ...)
    evals: tuple[int, ...] = ()  # several evals of one checkpoint pooled into this record: their chain ids

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


def _eval_vars(runs: Sequence[RunRecord]) -> dict[int, float]:
    """Eval-sampling variance V_r of every run with counts (k >= 2), by position in `runs`:
    inference.eval_variance, vectorised over the runs that share (k, n) (a store may hold
    thousands)."""
    import numpy as np

    groups: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(runs):
        if r.counts is not None and r.k >= 2 and r.n_problems:
            groups.setdefault((r.k, r.n_problems), []).append(i)
    out: dict[int, float] = {}
    for (k, n), idx in groups.items():
        c = np.array([runs[i].counts for i in idx], dtype=np.float64)
        if np.any(c < 0) or np.any(c > k):
            raise ValueError(f"counts must lie in [0, k={k}]")
        v = 1e4 / n**2 * np.sum(c * (k - c), axis=1) / (k**2 * (k - 1))
        out.update(zip(idx, v.tolist()))
    return out


def _fraction_rows(runs: Iterable[RunRecord]) -> tuple[tuple[str, ...] | None, list]:
    """(problem ids, rows of c_i / k) of the counted runs; ids None when they differ between runs
    (then rows are dicts {id: fraction}). Positions stand in for missing ids."""
    counted = [r for r in runs if r.counts is not None]
    if not counted:
        return None, []
    ids = [r.problem_ids if r.problem_ids is not None else tuple(f"#{i}" for i in range(len(r.counts)))
           for r in counted]
    if all(x == ids[0] for x in ids):
        import numpy as np

        k = np.array([r.k for r in counted], dtype=np.float64)[:, None]
        return ids[0], np.array([r.counts for r in counted], dtype=np.float64) / k
    return None, [dict(zip(pid, (c / r.k for c in r.counts))) for pid, r in zip(ids, counted)]


def _paired(cand: list[RunRecord], base: list[RunRecord]) -> inference.PairedSE | None:
    """Paired by-problem SE on the problems every counted run of both arms has."""
    iv, fv = _fraction_rows(cand)
    ib, fb = _fraction_rows(base)
    if len(fv) == 0 or len(fb) == 0:
        return None
    if iv is not None and iv == ib:
        return inference.paired_problem_se(fv, fb) if len(iv) >= 2 else None
    dv = fv if iv is None else [dict(zip(iv, row.tolist())) for row in fv]
    db = fb if ib is None else [dict(zip(ib, row.tolist())) for row in fb]
    common = set(dv[0])
    for d in dv[1:] + db:
        common &= set(d)
    order = [pid for pid in dv[0] if pid in common]  # keep the evaluator's order
    if len(order) < 2:
        return None
    return inference.paired_problem_se([[d[p] for p in order] for d in dv], [[d[p] for p in order] for d in db])


def _same_problems(a: RunRecord, b: RunRecord) -> bool:
    """Two partial runs on the same problems (ids when both have them; else the same count)."""
    return a.problem_ids is None or b.problem_ids is None or a.problem_ids == b.problem_ids


def _minutes(chains: int | None, chain_minutes: float | None, minutes_left: float | None):
    """(minutes for `chains` sequential chains, whether they fit in minutes_left)."""
    if chains is None or chain_minutes is None:
        return None, None
    need = chains * chain_minutes
    return _f(need), (None if minutes_left is None else bool(need <= minutes_left))


def forecast_noise(s2: float | None, v_eval: float | None, nu: float | None = None) -> forecast.NoiseParts | None:
    """The run-to-run variance for the forecast, split into its training part and one full eval's
    sampling part (no counts: all of it counts as training), with the dof of the pooled s^2: the
    forecast integrates sigma over that estimate's posterior, weighed again by the arms' means
    (forecast.sigma_nodes), rather than plugging s^2 in, which ignored that it is itself an estimate."""
    if s2 is None:
        return None
    ev = float(v_eval) if v_eval is not None else 0.0
    return forecast.NoiseParts(max(0.0, float(s2) - ev), ev, float(nu) if nu is not None and nu > 0 else None)


def forecast_posterior(full: dict[str, list[RunRecord]], baseline: str | None, v_of: dict[int, float],
                       noise: forecast.NoiseParts | None, reference: Reference | None,
                       offset_sd: float | None = None) -> forecast.Posterior | None:
    """The forecast's joint posterior over the baseline and every candidate with full runs that is
    a recipe (the base model and outside checkpoints are no idea of the family, and cannot be
    submitted). `full`: full runs by candidate key; `v_of`: each run's V_r by id(); `offset_sd`: the
    setup offset's sd in use (default: the reference's)."""
    if noise is None:
        return None

    def arm(name: str, scored: list[RunRecord]) -> forecast.ArmRuns:
        return forecast.ArmRuns(name, tuple(r.score for r in scored), tuple(v_of.get(id(r)) for r in scored))

    cands = [arm(k, vr) for k, vr in full.items() if k != baseline and vr and vr[0].kind == "recipe"]
    # the published mean's own sampling noise: n_ref runs of the same run-to-run noise (as the verdicts
    # take it: s^2 / n_ref), not the published sd, which a store with more noise has outgrown
    ref = None if reference is None else forecast.PublishedRef(
        float(reference.mean), math.sqrt(noise.run_var), int(reference.n),
        float(offset_sd if offset_sd is not None else getattr(reference, "offset_sd", inference.DEFAULT_OFFSET_SD)))
    return forecast.posterior(arm(baseline or "baseline", full.get(baseline, []) if baseline else []), cands,
                              noise, ref)


def _forecasts(post: forecast.Posterior | None) -> dict[str, report.Forecast]:
    """{arm name: its forecast} (points, plain floats)."""
    if post is None:
        return {}
    return {name: report.Forecast(**{k: _f(v) for k, v in f.to_json().items()})
            for name, f in zip(post.names, post.forecasts())}


@dataclass(frozen=True)
class _Runs:
    """The runs of one report, split: full runs by candidate, partial ones by (candidate, k, n),
    each run's eval-sampling variance V_r by id()."""

    full: dict
    part: dict
    v_of: dict
    full_k: int | None
    full_n: int | None
    notes: tuple[str, ...] = ()  # evaluations of one checkpoint that could not be pooled


def _split(runs: list[RunRecord], full_k: int | None, full_n: int | None) -> _Runs:
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
    notes: list[str] = []
    for key, vr in full.items():  # one training, one run: a checkpoint's evals pooled
        full[key], more = pooled_evals.merge(vr)
        notes += more
    runs = [r for vr in full.values() for r in vr] + [r for vr in part.values() for r in vr]
    vr_all = _eval_vars(runs)
    v_of = {id(r): vr_all[i] for i, r in enumerate(runs) if i in vr_all}
    return _Runs(full, part, v_of, full_k, full_n, tuple(notes))


@dataclass(frozen=True)
class _Pool:
    """The pooled noise as the rule uses it: s^2 on nu dof (None: no estimate), the local dof."""

    s2: float | None
    nu: float
    nu_local: int
    split: inference.NoiseSplit
    forecast: forecast.NoiseParts | None = None  # the forecast's own (opsdctl.stats.bet.noise_estimate)

    @property
    def s(self) -> float | None:
        return math.sqrt(self.s2) if self.s2 is not None else None


def _noise(grouped: _Runs, reference: Reference | None, notes: list[str]) -> tuple[report.Noise, _Pool]:
    """One s^2 pooled over every candidate's full runs, the prior only while the local scatter allows it."""
    ss_local, nu_local = inference.within_ss([[r.score for r in v] for v in grouped.full.values()])
    s0, nu0 = (None, 0) if reference is None else inference.prior_from_reference(reference.sd, reference.n, reference.prior)
    check = inference.prior_check(ss_local, nu_local, s0, nu0)
    s2, nu = inference.pooled_with_weight(ss_local, nu_local, s0, nu0, check.weight)
    if s0 is not None and check.weight < 1.0:
        limit = inference.full_weight_scatter(check.nu_local, s0, nu0)
        notes.append(
            f"prior down-weighted: the published sd {s0:.2f} keeps its full weight while the local scatter "
            f"on {check.nu_local} dof is at most {limit:.2f} (F test p >= {inference.PRIOR_FULL_AT:g}); "
            f"s = {check.s_local:.2f} gives p = {check.p:.3f}, so it keeps {check.weight:.0%} of its {nu0} dof")
    pooled_runs = [r for v in grouped.full.values() for r in v]
    # one full eval's sampling variance: a pooled re-eval's V_r is scaled back to the protocol's k
    v_runs = [grouped.v_of[id(r)] * r.k / (grouped.full_k or r.k) for r in pooled_runs if id(r) in grouped.v_of]
    n_no_counts = sum(1 for r in pooled_runs if r.counts is None)
    split = inference.noise_split(s2, v_runs)
    # the forecast keeps the published sd at its full dof (opsdctl.stats.bet: why)
    f_s2, f_nu = bet.noise_estimate(ss_local, nu_local, s0, min(nu0, bet.PRIOR_DOF) if s0 is not None else 0)
    pool = _Pool(s2, nu, nu_local, split, forecast_noise(f_s2, inference.noise_split(f_s2, v_runs).v_eval, f_nu))
    noise = report.Noise(
        s=_f(pool.s), nu=nu, nu_local=nu_local, s_local=_f(check.s_local), tau2=_f(split.tau2),
        v_eval=_f(split.v_eval), s0=_f(s0), nu0=_f(check.weight * nu0 if s0 is not None else 0.0),
        prior_check=None if s0 is None else report.PriorCheck(
            _f(check.chi2), _f(check.p), inference.PRIOR_FULL_AT, check.kept, _f(check.weight), check.p is not None),
        eval_dominates=split.eval_dominates, runs_with_counts=len(v_runs), runs_without_counts=n_no_counts,
        note=inference.NOT_ENOUGH_RUNS if s2 is None else None,
        v_eval_note=(f"{n_no_counts} run(s) without per-problem counts: no V_r, left out of mean V_r"
                     if n_no_counts else None),
        advice=("eval sampling dominates the run-to-run noise: more samples per problem would cut noise "
                "more cheaply than re-training") if split.eval_dominates else None)
    return noise, pool


@dataclass(frozen=True)
class _Base:
    """The baseline mean the verdicts use and its variance (None: no baseline / no noise estimate)."""

    mean: float | None
    var: float | None
    n_local: int
    use_ref: bool
    ref_n: int | None
    offset_sd: float  # the setup offset's sd in use (widened by what the local runs show)


def _baseline(grouped: _Runs, baseline: str | None, reference: Reference | None, pool: _Pool,
              notes: list[str]) -> tuple[report.Baseline, _Base]:
    """Local runs, the published mean with its setup offset, or both (by precision)."""
    base_runs = grouped.full.get(baseline, []) if baseline is not None else []
    s2, s, nu = pool.s2, pool.s, pool.nu
    cfg_offset_sd = float(getattr(reference, "offset_sd", inference.DEFAULT_OFFSET_SD)) if reference else 0.0
    offset_sd = cfg_offset_sd
    b_scores = [r.score for r in base_runs]
    n_local = len(b_scores)
    local_mean = sum(b_scores) / n_local if n_local else None
    ref_check = None
    if reference is not None and n_local and s is not None and nu > 0:
        ref_check = inference.reference_check(local_mean, n_local, float(reference.mean), int(reference.n), s, nu)
    use_ref = reference is not None and (n_local == 0 or ref_check is not None)
    if reference is not None and n_local and s is None:
        use_ref = False  # nothing to weigh the two with: the local runs alone
    if ref_check is not None:  # the offset the local baseline shows widens the published mean's offset sd
        offset_sd = float(inference.offset_sd_seen(ref_check.diff, ref_check.se**2, offset_sd))
    if n_local and use_ref:
        source = "runs+reference"
    elif n_local:
        source = "runs"
    elif reference is not None:
        source = "reference"
    else:
        source = None
        notes.append("no baseline: no full runs of the baseline variant and no reference; deltas cannot be computed")
    ref_n = int(reference.n) if reference is not None else None
    if source is None:
        b_mean, b_var = None, None
    elif s is None:
        b_mean, b_var = (local_mean if n_local else float(reference.mean)), None
    else:
        b_mean = inference.baseline_mean(local_mean, n_local, s2, None if reference is None else float(reference.mean),
                                         ref_n, offset_sd, use_ref)
        b_var = inference.baseline_var(s2, n_local, ref_n, offset_sd, use_ref)
    if ref_check is not None:
        rc = ref_check
        widened = (f", widened from {cfg_offset_sd:g} to fit the difference seen" if offset_sd > cfg_offset_sd + 1e-9
                   else "")
        notes.append(
            f"published mean {reference.mean:.2f} vs the local baseline {local_mean:.2f} ({n_local} run"
            f"{'s' if n_local != 1 else ''}): difference {rc.diff:+.2f}, 95% CI [{rc.ci_low:+.2f}, "
            f"{rc.ci_high:+.2f}], p = {rc.p:.3f}: combined with the local runs by precision "
            f"(setup offset sd {offset_sd:.2f}{widened})")
    would_buy = []
    if source == "reference" and s2 is not None:
        for extra in (1, 2):
            vb = inference.baseline_var(s2, extra, ref_n, offset_sd, True)
            would_buy.append(report.WouldBuy(extra, _f(math.sqrt(vb))))
        notes.append(
            f"against the published reference with a setup-offset sd of {offset_sd:g} point"
            f"{'s' if offset_sd != 1 else ''}: SE of the baseline mean {math.sqrt(b_var):.2f}; 1 local baseline "
            f"run would make it {would_buy[0].se_mean:.2f}, 2 runs {would_buy[1].se_mean:.2f} "
            "(`opsdctl queue baseline --repeats 2`)")
    b_se = math.sqrt(b_var) if b_var is not None else None
    b_half = inference.t_ppf(0.5 + inference.CI_LEVEL / 2.0, nu) * b_se if b_se is not None and nu > 0 else None
    doc = report.Baseline(
        name=baseline, source=source,
        n=n_local if n_local else (ref_n if source == "reference" else 0), n_local=n_local, mean=_f(b_mean),
        sd=_f(_sd(b_scores) if n_local else (reference.sd if source == "reference" else None)), se_mean=_f(b_se),
        mean_ci_low=_f(None if b_half is None else b_mean - b_half),
        mean_ci_high=_f(None if b_half is None else b_mean + b_half),
        runs=tuple(_f(y) for y in b_scores), chain_ids=tuple(r.chain_id for r in base_runs),
        code=base_runs[-1].code if base_runs else None,
        reference=None if reference is None else report.PublishedRef(
            _f(reference.mean), _f(reference.sd), reference.n, reference.prior, _f(cfg_offset_sd)),
        offset_sd=_f(offset_sd) if use_ref else None,
        reference_check=None if ref_check is None else report.ReferenceCheck(
            _f(ref_check.diff), _f(ref_check.se), _f(ref_check.ci_low), _f(ref_check.ci_high), _f(ref_check.p),
            ref_check.significant),
        local_runs_would_buy=tuple(would_buy))
    return doc, _Base(b_mean, b_var, n_local, use_ref, ref_n, offset_sd)


def _family(runs: list[RunRecord], grouped: _Runs, family: Sequence[str] | None, candidates: list[str],
            baseline: str | None, has_base: bool, alpha: float) -> report.ErrorSpending:
    """Every candidate tried (or the declared family), the shown ones included. A candidate is a
    run's key (opsdctl.stats.candidates: knobs x code tree), so variants with another's knobs on the
    same code are that candidate, and the baseline's knobs are the baseline."""
    tried = list(dict.fromkeys(r.key for r in runs))
    if family is None:
        fam = tried
    else:
        named = set(family)
        fam = [k for k in tried if k in named or any(r.variant in named for r in runs if r.key == k)]
    fam += [v for v in candidates if (grouped.full.get(v) or any(k[0] == v for k in grouped.part)) and v not in fam]
    fam = [k for k in fam if k != baseline]
    m = len(fam) if has_base else 0
    flat = inference.look_level(sequential.J_MIN, m, inference.MIN_LOCAL_DOF, alpha) if m else 0.0
    return report.ErrorSpending(
        m=m, alpha=alpha, family=tuple(sorted(fam)),
        better_at=_f(1.0 - flat) if flat else None, worse_at=_f(flat) if flat else None,
        looks=report.Looks(sequential.J_MIN, sequential.J_FLAT, sequential.GROWTH,
                       _f(sequential.boundary_constant(alpha / m)) if m else None, inference.MIN_LOCAL_DOF))


def _entry(v: str, vr: list[RunRecord], grouped: _Runs, pool: _Pool, b: _Base, base_runs: list[RunRecord], *, m: int,
           alpha: float, chain_minutes: float | None, minutes_left: float | None) -> report.Entry:
    """One candidate with full runs against the baseline: the verdict rule (opsdctl.stats.inference)."""
    ys = [r.score for r in vr]
    n_v, mean_v = len(ys), sum(ys) / len(ys)
    se_m, lo_m, hi_m = inference.mean_interval(mean_v, n_v, pool.s, pool.nu)
    v_evals = [grouped.v_of[id(r)] for r in vr if id(r) in grouped.v_of]
    noise_note = inference.NOT_ENOUGH_RUNS if pool.s2 is None else None
    out = dict(delta=None, se_delta=None, ci_low=None, ci_high=None, p_beat=None, verdict=None, better_at=None,
               worse_at=None, runs_needed=None, runs_needed_worse=None, needs_baseline_runs=False,
               runs_needed_both_arms=None, minutes_needed=None, fits=None, paired_delta=None, paired_se=None,
               paired_problems=None, note=noise_note)
    if b.mean is not None:
        d = inference.compare_means(mean_v, n_v, b.mean, b.var, pool.s2, pool.nu)
        out.update(delta=_f(d.delta), verdict=inference.UNDECIDED)
        if d.se is not None:
            level = inference.look_level(n_v + b.n_local, m, pool.nu_local, alpha)
            out.update(se_delta=_f(d.se), ci_low=_f(d.ci_low), ci_high=_f(d.ci_high), p_beat=_f(d.p_beat),
                       better_at=_f(1.0 - level) if level else None, worse_at=_f(level) if level else None,
                       verdict=inference.rule_verdict(d.delta, d.se, pool.nu, level))
            if not level:
                out["note"] = (f"no verdict yet: needs {inference.MIN_LOCAL_DOF} repeat dof in the store "
                               f"(now {pool.nu_local}) to check the prior" if pool.nu_local < inference.MIN_LOCAL_DOF
                               else f"no verdict yet: needs {sequential.J_MIN} local runs in the comparison "
                                    f"(now {n_v + b.n_local})")
            if out["verdict"] == inference.UNDECIDED:
                arms = inference.Arms(pool.s, n_v, b.n_local, pool.nu, pool.nu_local, m,
                                      b.ref_n if b.use_ref else None, b.offset_sd, b.use_ref, alpha)
                rn = inference.rule_runs_needed(d.delta, arms)
                out["runs_needed" if d.delta > 0 else "runs_needed_worse"] = rn.extra
                out.update(needs_baseline_runs=rn.needs_baseline_runs, runs_needed_both_arms=rn.both_arms)
                chains = rn.extra if rn.extra is not None else (2 * rn.both_arms if rn.both_arms else None)
                out["minutes_needed"], out["fits"] = _minutes(chains, chain_minutes, minutes_left)
        paired = _paired(vr, base_runs) if base_runs else None
        if paired is not None:
            out.update(paired_delta=_f(paired.delta), paired_se=_f(paired.se), paired_problems=paired.n_problems)
    return report.Entry(
        name=v, variants=tuple(dict.fromkeys(r.variant for r in vr)), code=vr[0].code, n=n_v, mean=_f(mean_v),
        sd=_f(_sd(ys)), look=n_v + b.n_local, partial=False, se_mean=_f(se_m), mean_ci_low=_f(lo_m),
        mean_ci_high=_f(hi_m), v_eval=_f(sum(v_evals) / len(v_evals)) if v_evals else None, k=min(r.k for r in vr),
        n_problems=vr[0].n_problems,
        runs=tuple(_f(y) for y in ys), chain_ids=tuple(r.chain_id for r in vr), **out)


def _rank(e: report.Entry):
    """P(beat) first; without it (nu == 0 / no baseline) by delta, then mean."""
    p, d = e.p_beat, e.delta
    return (p is None, -(p or 0.0), -(d if d is not None else 0.0), -(e.mean or 0.0))


def _partials(grouped: _Runs, pool: _Pool, baseline: str | None, names: list[str],
              shown_only: bool) -> list[report.PartialEntry]:
    """Partial evaluations apart (never pooled, no verdict), each read against the baseline's
    partial on the same problems."""
    tau2 = pool.split.tau2 if pool.split.tau2 is not None else pool.s2  # without a split, training noise at most s^2

    def partial_se(pr: list[RunRecord]) -> tuple[float | None, float | None]:
        v_evals = [grouped.v_of[id(r)] for r in pr if id(r) in grouped.v_of]
        mean_vr = sum(v_evals) / len(v_evals) if v_evals else None
        se_eval = math.sqrt(mean_vr / len(pr)) if mean_vr is not None else None
        return (math.sqrt((tau2 + mean_vr) / len(pr)) if tau2 is not None and mean_vr is not None else None), se_eval

    out = []
    for (v, k, n_p), pr in grouped.part.items():
        if shown_only and v not in names and v != baseline:
            continue
        se, se_eval = partial_se(pr)
        ys = [r.score for r in pr]
        mean = sum(ys) / len(ys)
        note = f"{PARTIAL_LABEL} ({n_p} problems x {k} samples): not pooled, no verdict"
        vs = None
        bp = [r for r in grouped.part.get((baseline, k, n_p), []) if _same_problems(r, pr[0])]
        if v != baseline and bp and se is not None:
            b_se, _ = partial_se(bp)
            if b_se is not None:
                read = screen_reading(mean - sum(r.score for r in bp) / len(bp), math.sqrt(se**2 + b_se**2))
                vs = report.ScreenReading(_f(read.delta), _f(read.se), _f(read.p_effect), len(bp))
        elif v != baseline and bp:
            note += "; without per-problem counts there is no SE to read it against the baseline's partial"
        elif v != baseline:
            note += ("; no baseline partial on these problems to read it against yet (queueing a partial queues "
                     "one once the baseline is in the store; by hand: "
                     f"`opsdctl queue {baseline or 'BASELINE'} --partial {n_p}x{k}`)")
        out.append(report.PartialEntry(
            name=v, variants=tuple(dict.fromkeys(r.variant for r in pr)), code=pr[0].code, n=len(ys), mean=_f(mean),
            sd=_f(_sd(ys)), se=_f(se), delta=None, ci_low=None, ci_high=None, p_beat=None, verdict=None,
            runs_needed=None, partial=True, label=PARTIAL_LABEL, k=k, n_problems=n_p, se_eval=_f(se_eval),
            vs_baseline=vs, runs=tuple(_f(y) for y in ys), chain_ids=tuple(r.chain_id for r in pr), note=note))
    return out


def _forecast_model(post: forecast.Posterior | None, reference: Reference | None,
                    offset_sd: float) -> report.ForecastModel | None:
    if post is None:
        return None
    return report.ForecastModel(
        official_runs=post.official_runs, spread=_f(post.spread), spread_sd=_f(post.spread_sd),
        spread_prior=round(forecast.FamilyPrior().spread, 2), train_var=_f(post.noise.train_var), eval_var=_f(post.noise.eval_var),
        reference=_f(post.reference_mean), offset_sd=_f(offset_sd) if reference is not None else None,
        arms=tuple(post.names), interval=forecast.INTERVAL,
        noise_var=_f(post.inputs.noise.run_var), noise_dof=_f(post.inputs.noise.dof))


def _screen(pool: _Pool, full_k: int | None, full_n: int | None) -> report.Screen | None:
    """What a screen can resolve: its SE read against the baseline's partial on the same problems."""
    tau2 = pool.split.tau2 if pool.split.tau2 is not None else pool.s2
    if tau2 is None or pool.split.v_eval is None or not full_k or not full_n:
        return None
    se_s = screen_se(tau2, pool.split.v_eval, SCREEN[0] * SCREEN[1] / float(full_k * full_n))
    return report.Screen(SCREEN[0], SCREEN[1], _f(se_s), _f(SCREEN_Z * se_s))


def build_report(
    runs: list[RunRecord],
    *,
    baseline: str | None,
    reference: Reference | None,
    variants: list[str] | None = None,
    family: Sequence[str] | None = None,
    full_k: int | None = None,
    full_n: int | None = None,
    chain_minutes: float | None = None,
    minutes_left: float | None = None,
) -> report.Report:
    """The whole comparison (see the module docstring for the rules); `.to_json()` is the
    `compare --json` document.

    `variants`: the ones to show (default: every one with runs); the noise always pools every
    variant in `runs`. `family`: the candidates the verdicts correct for (default: every
    candidate in `runs`); the shown ones always count.
    """
    for r in runs:
        _check(r)
    alpha = inference.ALPHA
    grouped = _split(runs, full_k, full_n)
    names = list(dict.fromkeys(variants)) if variants else list(dict.fromkeys(r.key for r in runs))
    candidates = [v for v in names if v != baseline]
    notes: list[str] = list(grouped.notes)
    noise, pool = _noise(grouped, reference, notes)
    base_doc, b = _baseline(grouped, baseline, reference, pool, notes)
    spending = _family(runs, grouped, family, candidates, baseline, b.mean is not None, alpha)
    base_runs = grouped.full.get(baseline, []) if baseline is not None else []
    full = sorted((_entry(v, grouped.full[v], grouped, pool, b, base_runs, m=spending.m, alpha=alpha,
                          chain_minutes=chain_minutes, minutes_left=minutes_left)
                   for v in candidates if grouped.full.get(v)), key=_rank)
    missing = [report.MissingEntry(v) for v in candidates
               if not grouped.full.get(v) and not any(k[0] == v for k in grouped.part)]
    partials = _partials(grouped, pool, baseline, names, bool(variants))

    # the bet: each arm's forecast of its official 5-run mean (opsdctl.stats.forecast)
    post = forecast_posterior(grouped.full, baseline, grouped.v_of, pool.forecast,
                              reference, b.offset_sd)
    fc = _forecasts(post)
    if base_doc.source is not None:
        base_doc = replace(base_doc, forecast=fc.get(baseline or "baseline", report.NO_FORECAST))
    entries = tuple([replace(e, forecast=fc.get(e.name, report.NO_FORECAST)) for e in full]
                    + [replace(e, forecast=fc.get(e.name, report.NO_FORECAST)) for e in missing] + partials)
    return report.Report(
        baseline=base_doc, noise=noise, spending=spending, screen=_screen(pool, grouped.full_k, grouped.full_n),
        forecast_model=_forecast_model(post, reference, b.offset_sd),
        budget=report.Budget(_f(chain_minutes), _f(minutes_left)), full_k=grouped.full_k, full_n=grouped.full_n,
        notes=tuple(notes), entries=entries, posterior=post)
