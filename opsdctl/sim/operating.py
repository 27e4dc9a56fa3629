"""Operating characteristics of compare's verdicts: how often they are wrong, and how often right.

`verdicts` is compare's verdict rule (opsdctl.stats.compare.build_report) over many simulated
studies that share their run counts: it calls the rule's own functions (opsdctl.stats.inference)
on arrays over the studies and holds no formula of its own, so a seeded simulation of thousands
of studies and a dozen looks runs in seconds; tests/unit/sim/test_operating.py checks that it gives
build_report's verdicts exactly, then measures the error-rate goals with it. The scenarios
below are those goals: a wrong prior, a setup offset, repeated looks, a cherry-picked family,
and power. Runs are normal: y = baseline + effect + N(0, sigma^2) per run (the per-problem
binomial world of the planner's simulator gives run scores this close to normal; the verdicts
only read run scores).

    python benchmarks/stats_goals.py      prints every scenario and writes benchmarks/results/
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from opsdctl.stats import inference

BETTER, WORSE, UNDECIDED = inference.CODE_BETTER, inference.CODE_WORSE, inference.CODE_UNDECIDED
PUBLISHED = (54.22, 1.48, 5)  # the published baseline: mean, sd, n (DEVELOPERS.md)


@dataclass(frozen=True)
class Ref:
    mean: float = PUBLISHED[0]
    sd: float = PUBLISHED[1]
    n: int = PUBLISHED[2]
    prior: bool = True
    offset_sd: float = inference.DEFAULT_OFFSET_SD


def verdicts(base: np.ndarray, cands: Sequence[np.ndarray], ref: Ref | None, m: int,
             others: Sequence[np.ndarray] = (), alpha: float = inference.ALPHA) -> np.ndarray:
    """Verdict codes (candidates x studies) of build_report over studies that share run counts:
    the same functions of opsdctl.stats.inference, called on arrays over studies.

    base: (N, n_b) local baseline scores (n_b may be 0); cands: (N, n_v) arrays, the candidates
    judged; others: more variants in the store (their scatter pools into the noise); m: the
    family's size."""
    n_studies, n_b = base.shape
    if n_b == 0 and ref is None:
        return np.zeros((len(cands), n_studies), dtype=int)
    ss, nu_l = inference.within_ss([base, *cands, *others])
    ss = np.broadcast_to(ss, (n_studies,))  # 0.0 when no group has two runs
    s0, nu0 = (None, 0) if ref is None else inference.prior_from_reference(ref.sd, ref.n, ref.prior)
    s2, nu = inference.pooled_with_weight(ss, nu_l, s0, nu0, inference.prior_weight(ss, nu_l, s0, nu0))
    # the baseline as build_report takes it, per study
    ybar = base.mean(axis=1) if n_b else None
    o_sd = ref.offset_sd if ref is not None else 0.0
    if n_b and ref is not None:
        with np.errstate(invalid="ignore"):
            se_ref = inference.reference_se(np.sqrt(s2), n_b, ref.n)
        o_sd = inference.offset_sd_seen(ybar - ref.mean, se_ref**2, ref.offset_sd)
    ref_mean, ref_n = (ref.mean, ref.n) if ref is not None else (None, None)
    b_mean = inference.baseline_mean(ybar, n_b, s2, ref_mean, ref_n, o_sd, ref is not None)
    b_var = inference.baseline_var(s2, n_b, ref_n, o_sd, ref is not None)
    out = np.zeros((len(cands), n_studies), dtype=int)
    for i, c in enumerate(cands):
        n_v = c.shape[1]
        level = inference.look_level(n_v + n_b, m, nu_l, alpha)
        out[i] = inference.verdict_code(c.mean(axis=1) - b_mean, inference.se_delta(s2, n_v, b_var), nu, level)
    return out


# --- the scenarios: the error-rate goals the verdict rule is held to ----------------------------


def _looks(protocol: str, runs: int) -> list[tuple[int, int]]:
    """(baseline runs, candidate runs) at each look of a protocol, a look after every run:
    "alternate": c1, b1, c2, b2, ... (12 looks for 6 per arm); "pairs": a run of each, then a
    look; "reference": candidate runs only, against the published mean; "reference-then-baseline":
    all candidate runs first, then the baseline's."""
    if protocol == "alternate":
        return [x for k in range(1, runs + 1) for x in ((k - 1, k), (k, k))]
    if protocol == "pairs":
        return [(k, k) for k in range(1, runs + 1)]
    if protocol == "reference":
        return [(0, k) for k in range(1, runs + 1)]
    if protocol == "reference-then-baseline":
        return [(0, k) for k in range(1, runs + 1)] + [(k, runs) for k in range(1, runs + 1)]
    raise ValueError(f"unknown protocol {protocol!r}")


def rate_any_look(rng: np.random.Generator, studies: int, *, effect: float = 0.0, sigma: float = 1.48,
                  offset: float = 0.0, protocol: str = "alternate", runs: int = 6, ref: Ref | None = Ref(),
                  m: int = 1, code: int = BETTER) -> float:
    """P(the verdict is `code` at some look) for one candidate of true effect `effect` against a
    local setup `offset` points above the published mean, looking after every run."""
    mu = (ref.mean if ref else PUBLISHED[0]) + offset
    b = rng.normal(mu, sigma, (studies, runs))
    c = rng.normal(mu + effect, sigma, (studies, runs))
    hit = np.zeros(studies, bool)
    for n_b, n_v in _looks(protocol, runs):
        hit |= verdicts(b[:, :n_b], [c[:, :n_v]], ref, m)[0] == code
    return float(hit.mean())


def rate_at(rng: np.random.Generator, studies: int, *, effect: float, sigma: float = 1.48, n_b: int = 3,
            n_v: int = 3, ref: Ref | None = Ref(), m: int = 1, code: int = BETTER, offset: float = 0.0) -> float:
    """P(verdict `code`) at one look: n_b local baseline runs, n_v candidate runs."""
    mu = (ref.mean if ref else PUBLISHED[0]) + offset
    b = rng.normal(mu, sigma, (studies, n_b))
    c = rng.normal(mu + effect, sigma, (studies, n_v))
    return float((verdicts(b, [c], ref, m)[0] == code).mean())


def rate_single_look_grid(rng: np.random.Generator, studies: int, *, sigma: float, offset: float = 0.0,
                          n_b_values=(1, 2, 3), n_v_values=(1, 2, 3), ref: Ref | None = Ref()) -> float:
    """False `better` at one look, averaged over 1-3 runs per arm (the grid a one-look rule's error rate is quoted over)."""
    return float(np.mean([rate_at(rng, studies, effect=0.0, sigma=sigma, n_b=nb, n_v=nv, ref=ref, offset=offset)
                          for nb in n_b_values for nv in n_v_values]))


def cherry_pick(rng: np.random.Generator, studies: int, *, candidates: int = 6, n_b: int = 2, n_v: int = 2,
                sigma: float = 1.48, ref: Ref | None = Ref(), m: int | None = None) -> float:
    """`compare BEST` after `candidates` null candidates: P(the best-looking one is `better`),
    with the family the store defines (m = candidates; m = 1 reproduces "correct over what is shown")."""
    mu = ref.mean if ref else PUBLISHED[0]
    b = rng.normal(mu, sigma, (studies, n_b))
    cs = [rng.normal(mu, sigma, (studies, n_v)) for _ in range(candidates)]
    v = verdicts(b, cs, ref, candidates if m is None else m)
    best = np.argmax(np.stack([c.mean(axis=1) for c in cs]), axis=0)
    return float((v[best, np.arange(studies)] == BETTER).mean())


def goals(seed: int = 16, studies: int = 4000) -> dict:
    """Every scenario of the error-rate goals, seeded: {name: (rate, goal, "<=" | ">=")}."""
    rng = np.random.default_rng(seed)
    out = {
        "wrong prior: sigma 2.5, prior 1.48, one look, 1-3 runs per arm":
            (rate_single_look_grid(rng, studies, sigma=2.5), 0.05, "<="),
        "offset +1, baseline = reference, candidate looks after each of 6 runs":
            (rate_any_look(rng, studies, offset=1.0, protocol="reference"), 0.05, "<="),
        "offset +2, baseline = reference, candidate looks after each of 6 runs":
            (rate_any_look(rng, studies, offset=2.0, protocol="reference"), 0.10, "<="),
        "offset +1, local baseline runs too (alternate, 6 per arm)":
            (rate_any_look(rng, studies, offset=1.0, protocol="alternate"), 0.05, "<="),
        "offset +2, local baseline runs too (alternate, 6 per arm)":
            (rate_any_look(rng, studies, offset=2.0, protocol="alternate"), 0.05, "<="),
        "offset +2, reference first, then baseline runs (6 + 6 looks)":
            (rate_any_look(rng, studies, offset=2.0, protocol="reference-then-baseline"), 0.10, "<="),
        "repeated looks, sigma 1.48: after every run, 6 per arm (alternate)":
            (rate_any_look(rng, studies, sigma=1.48, protocol="alternate"), 0.05, "<="),
        "repeated looks, sigma 2.5 (prior 1.48): after every run, 6 per arm (alternate)":
            (rate_any_look(rng, studies, sigma=2.5, protocol="alternate"), 0.05, "<="),
        "repeated looks, sigma 1.48: pairs of runs, 6 per arm":
            (rate_any_look(rng, studies, sigma=1.48, protocol="pairs"), 0.05, "<="),
        "repeated looks, sigma 2.5 (prior 1.48): pairs of runs, 6 per arm":
            (rate_any_look(rng, studies, sigma=2.5, protocol="pairs"), 0.05, "<="),
        "cherry-picked: compare BEST after 6 null candidates (2 + 2 runs)":
            (cherry_pick(rng, studies), 0.05, "<="),
        "power: +3 points, 3 runs per arm, at that look":
            (rate_at(rng, studies, effect=3.0), 0.50, ">="),
        "power: +3 points, by 3 runs per arm, a look after every run":
            (rate_any_look(rng, studies, effect=3.0, runs=3), 0.50, ">="),
    }
    return out


def prior_weight_dips(rng: np.random.Generator, studies: int, *, sigma: float = 1.48, runs: int = 6,
                      ref: Ref = Ref()) -> tuple[float, float]:
    """With the published sd right (true sigma = ref.sd), over whole sessions (alternate, a look after
    every run): (P(the prior's weight falls below 1/2 at some look), mean of its lowest weight)."""
    b = rng.normal(ref.mean, sigma, (studies, runs))
    c = rng.normal(ref.mean, sigma, (studies, runs))
    s0, nu0 = inference.prior_from_reference(ref.sd, ref.n, ref.prior)
    low = np.ones(studies)
    for n_b, n_v in _looks("alternate", runs):
        ss, nu_l = inference.within_ss([b[:, :n_b], c[:, :n_v]])
        if nu_l:
            low = np.minimum(low, inference.prior_weight(ss, nu_l, s0, nu0))
    return float((low < 0.5).mean()), float(low.mean())


def goals_markdown(results: dict, studies: int, seed: int) -> str:
    lines = [f"Seeded simulation ({studies} studies a row, seed {seed}; normal runs; published reference "
             f"{PUBLISHED[0]} / {PUBLISHED[1]} / n = {PUBLISHED[2]}, offset sd {inference.DEFAULT_OFFSET_SD:g}):", "",
             "| situation | rate | goal | |", "|---|---|---|---|"]
    for name, (rate, goal, op) in results.items():
        met = rate <= goal if op == "<=" else rate >= goal
        what = "`better`" if "power" in name else "false `better`"
        lines.append(f"| {name} | {what} {100 * rate:.1f}% | {op} {100 * goal:.0f}% | {'met' if met else 'MISSED'} |")
    return "\n".join(lines)
