"""Which queued chain next: `fifo` (the queue as it is) or `adaptive` (settle the most questions).

A pure function of the queue, the compare report (opsdctl.stats.compare.build_report over the
store's scored runs) and the time left. The worker's gate and the simulator both call `plan`.

What the adaptive policy may do on its own (and nothing else):
1. re-order the queued chains;
2. skip queued chains, each with a reason, in exactly two cases: the variant's verdict is
   already `worse`, or one of its evaluations was stopped as futile;
3. with --auto-repeat only: propose ONE extra chain at a time (a fresh seed of an existing
   variant, same code snapshot) when no queued chain can settle anything, for the candidate
   (or the baseline) that the rules below rank first and whose runs fit in the time left,
   never one worth nothing (a value-of-information pick below EXTRA_MIN_GAIN expected verdicts
   falls back to compare's own `Next:` rule: runs_needed that fit). The gate queues it only
   once the user's queued chains have run (before them with [planner] auto_repeat_first), up to
   [planner] auto_repeat_max when the user sets one.
It never cancels a running chain, never changes recipes, never skips the first run of a
variant, and a user's --priority always ranks first.

Tiers, in this order (ties: higher priority, then tier key, then queue order):
  0  the baseline's first run, when there is no baseline at all (no store runs, no reference);
  1  the first run of every variant without a full run yet (queue order; see "value of
     information" below for when a first run waits);
  2  repeats that can settle a verdict in the time left:
     2a candidates with delta > 0, `undecided`, whose runs_needed (inference.runs_needed) chains
        fit; by P(beat), highest first; only as many repeats as runs_needed;
        also baseline runs if a candidate needs baseline runs too and the runs both arms need
        fit (against the published reference as well: local baseline runs remove its setup
        offset); ranked with that candidate;
     2b candidates with delta <= 0, `undecided`, whose runs to settle `worse` (runs_needed on
        -delta) fit; by P(beat), lowest first;
     2c without a noise estimate (nu = 0, no prior): repeats of the best delta first (a
        second run is what makes a noise estimate);
  3  other repeats of undecided candidates with delta > 0 (out of reach in the time left, or
     beyond the runs that would settle them): by P(beat), highest first (their runs are still
     the most informative about a winner);
  4  everything else (settled `better` variants, undecided ones with delta <= 0 out of reach,
     second chains of variants not yet run, the baseline when nothing needs it), queue order.
Skipped: variants `worse`, and variants with a stopped-futile chain.

Value of information (tier "v", ahead of the tiers): when the time left, the chain estimates and a
noise estimate are known and the baseline is the published reference (alone or combined with local
runs), the next chain is picked
from the allocation of the R chains that still fit with the most verdicts expected to settle by the
end (_Voi: compare's own rule, |delta| >= c_j sqrt(s^2/n + var_b), c_j the critical t of the look
j = n + local baseline runs (alpha spent over the looks, none before enough repeat dof), var_b the
baseline mean's variance, predicted from a
N(0, PRIOR_EFFECT_SD^2) prior on each idea's effect updated by its runs; m' counts the new ideas
the allocation tries, so trying one more idea is weighed against the bar it raises for all; the
queued baseline chains (plus --auto-repeat's) may go to the baseline, whose runs shrink var_b for
every candidate at once, and a plan that wants them runs a baseline chain first):
a new idea's first run if the allocation tries any, else the repeat that most raises its chance to
settle (with --auto-repeat, Plan.extra_first: the extra chain is that pick). The tiers order the rest, and
decide alone when there is no budget, no noise estimate, or baseline runs. So a queued idea may
never get its first run when the chains are worth more on the leaders; [planner] try_every_variant
(worker --try-every-variant) turns value of information off for users who want every idea tried. Plan.full_eval names the
variant whose evaluation futility must not stop: a repeat run to settle `worse`, or any chain when
the minutes a stop saves could not buy one more chain before the deadline.

"Fits in the time left": r more chains fit when (r - 1) x median + high <= usable seconds (the
chains before the last take their median; the last must still pass admission with its high
quantile). `runs_needed` assumes the observed delta and s hold (inference.runs_needed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from opsdctl.stats import inference

FIFO, ADAPTIVE = "fifo", "adaptive"
POLICIES = (FIFO, ADAPTIVE)


@dataclass(frozen=True)
class QueuedItem:
    chain_id: int
    variant: str  # label, as in the compare report
    priority: int = 0


@dataclass(frozen=True)
class Slot:
    chain_id: int
    variant: str
    tier: str  # "0", "1", "2a", "2b", "2c", "3"
    why: str


@dataclass
class Plan:
    order: list[int]  # chain ids, in the order to try them
    skips: dict[int, str] = field(default_factory=dict)  # chain id -> reason
    extra: Optional[str] = None  # --auto-repeat: the variant to queue one more chain of
    extra_why: str = ""
    slots: list[Slot] = field(default_factory=list)
    extra_first: bool = False  # the extra chain goes before the queued ones (the value-of-information pick)
    full_eval: list[str] = field(default_factory=list)  # variants whose evaluations futility must not stop

    def to_json(self) -> dict:
        return {"order": self.order, "skips": {str(k): v for k, v in self.skips.items()},
                "extra": self.extra, "extra_why": self.extra_why, "extra_first": self.extra_first, "full_eval": self.full_eval,
                "slots": [{"chain_id": s.chain_id, "variant": s.variant, "tier": s.tier, "why": s.why} for s in self.slots]}


_TIER_RANK = {"v": -1, "0": 0, "1": 1, "2a": 2, "2b": 3, "2c": 4, "3": 5, "4": 6}


class _Cost:
    """Do r more chains fit? (r - 1) x median + high <= usable (None: no budget)."""

    def __init__(self, high_s: Optional[float], median_s: Optional[float], usable_s: Optional[float]):
        self.high = high_s
        self.median = median_s if median_s is not None else high_s
        self.usable = usable_s

    def fits(self, chains: Optional[int]) -> bool:
        if chains is None or chains < 1:
            return False
        if self.usable is None or self.high is None:
            return True
        return (chains - 1) * self.median + self.high <= self.usable


def _worse_runs(e: dict, report: dict) -> Optional[int]:
    """Extra candidate runs that would settle `worse` if delta and s hold: compare's own
    runs_needed_worse (the verdict rule's), else (a report without it) runs_needed on -delta."""
    if "runs_needed_worse" in e:
        return e["runs_needed_worse"]
    nz, b = report["noise"], report["baseline"]
    m = report["bonferroni"]["m"]
    if e.get("delta") is None or e["delta"] >= 0 or nz.get("s") is None or not m:
        return None
    return inference.runs_needed(-e["delta"], nz["s"], e["n"], b["n"], nz["nu"], m).extra


def plan(
    queued: Sequence[QueuedItem],
    report: Optional[dict],
    *,
    policy: str = ADAPTIVE,
    baseline: Optional[str] = None,
    usable_s: Optional[float] = None,
    chain_s: Optional[float] = None,
    chain_median_s: Optional[float] = None,
    dropped: Optional[Mapping[str, str]] = None,
    auto_repeat: bool = False,
    known_variants: Sequence[str] = (),
    voi: bool = True,
) -> Plan:
    """Order (and skip) the queued chains. `chain_s` / `chain_median_s`: one chain's high-quantile
    and median estimates; `dropped`: variant -> reason for variants with a stopped-futile chain;
    `known_variants`: variants that may receive an --auto-repeat chain (every variant with a run)."""
    if policy == FIFO:
        return Plan([q.chain_id for q in queued], slots=[Slot(q.chain_id, q.variant, "-", "queue order") for q in queued])
    cost = _Cost(chain_s, chain_median_s, usable_s)
    dropped = dict(dropped or {})
    entries = {e["name"]: e for e in (report or {}).get("variants", []) if not e.get("partial")}
    base = (report or {}).get("baseline") or {}
    base_source = base.get("source")
    noise_known = (report or {}).get("noise", {}).get("s") is not None

    # Candidates that settle only with baseline runs too: local baseline runs remove the published
    # mean's setup offset, so this holds against the reference as well as against store runs.
    base_for = {e["name"]: e for e in entries.values()
                if e.get("verdict") == inference.UNDECIDED and e.get("needs_baseline_runs")
                and base_source in ("runs", "runs+reference", "reference")
                and cost.fits(2 * (e.get("runs_needed_both_arms") or 0))}
    base_key = max((e["p_beat"] or 0.0) for e in base_for.values()) if base_for else None

    taken: dict[str, int] = {}
    slots: list[tuple[tuple, Slot]] = []
    skips: dict[int, str] = {}
    for pos, q in enumerate(queued):
        if q.variant in dropped:
            skips[q.chain_id] = dropped[q.variant]
            continue
        e = entries.get(q.variant)
        if e is not None and e.get("verdict") == inference.WORSE:
            at = e.get("worse_at") if e.get("worse_at") is not None else report["bonferroni"]["worse_at"]
            skips[q.chain_id] = f"verdict worse (P(beat) = {e['p_beat']:.3g} <= {at:.3g}): no more runs for it"
            continue
        j = taken.get(q.variant, 0)
        taken[q.variant] = j + 1
        tier, key, why = _classify(q, j, e, report, base, base_source, baseline, base_for, base_key, noise_known, cost)
        slots.append(((-q.priority, _TIER_RANK[tier], key, pos), Slot(q.chain_id, q.variant, tier, why)))
    pick = None
    if voi and noise_known and base_source in ("reference", "runs+reference") and not any(t[1].tier == "0" for t in slots):
        pick = _voi_pick(queued, entries, report, baseline, cost, dropped, auto_repeat,
                         baseline_known=baseline in set(known_variants))
    if pick is not None:
        variant, why, full, _gain = pick
        first = next((t for t in slots if t[1].variant == variant), None)
        if first is not None:
            slots.remove(first)
            key, sl = first
            slots.append(((key[0], _TIER_RANK["v"], 0.0, key[3]), Slot(sl.chain_id, sl.variant, "v", why)))
    slots.sort(key=lambda t: t[0])
    ordered = [s for _, s in slots]
    out = Plan([s.chain_id for s in ordered], skips, slots=ordered)
    if pick is not None:
        out.full_eval = [pick[0]] if pick[2] else []
        if not any(s.tier == "v" for s in ordered) and pick[3] >= EXTRA_MIN_GAIN:
            out.extra, out.extra_why, out.extra_first = pick[0], pick[1], True
            return out
    if auto_repeat and not any(s.tier in ("v", "0", "1", "2a", "2b", "2c") for s in ordered):
        # compare's own `Next:` rule: a repeat whose runs_needed fit (never a zero-value chain)
        out.extra, out.extra_why = _pick_extra(entries, baseline, base_for, report, cost, dropped,
                                               set(known_variants), noise_known)
    return out


def _classify(q, j, e, report, base, base_source, baseline, base_for, base_key, noise_known, cost):
    """(tier, key within the tier, why) of the j-th queued chain of q.variant."""
    if q.variant == baseline:
        if base_source is None and j == 0:
            return "0", 0.0, "no baseline yet: every delta needs it"
        if base_key is not None and j == 0:
            return "2a", -base_key, "a candidate needs baseline runs to settle"
        return "4", 0.0, "baseline: enough for now"
    n = (e or {}).get("n", 0)
    if n == 0:
        return ("1", 0.0, "first run of a new variant") if j == 0 else ("4", 0.0, "repeat of a variant not yet run")
    if not noise_known:
        if j == 0:
            return "2c", -(e.get("delta") if e.get("delta") is not None else e.get("mean") or 0.0), \
                "no noise estimate yet: repeat the best"
        return "4", 0.0, "no noise estimate yet"
    verdict, delta, p = e.get("verdict"), e.get("delta"), e.get("p_beat")
    if verdict == inference.BETTER:
        return "4", 0.0, "settled better: extra runs only tighten it"
    if verdict != inference.UNDECIDED or delta is None:
        return "4", 0.0, "nothing to settle"
    need = e.get("runs_needed")
    if delta > 0:
        if need is not None and cost.fits(need) and j < need:
            return "2a", -(p or 0.0), f"undecided, P(beat) {p:.3f}: +{need} run(s) could settle it"
        if e["name"] in base_for and j == 0:
            return "2a", -(p or 0.0), "undecided: settles with baseline runs too"
        if need is not None and j >= need:
            return "3", -(p or 0.0), f"undecided, P(beat) {p:.3f}: beyond the +{need} run(s) that could settle it"
        return "3", -(p or 0.0), f"undecided, P(beat) {p:.3f}: out of reach in the time left"
    w = _worse_runs(e, report)
    if w is not None and cost.fits(w) and j < w:
        return "2b", (p or 0.0), f"undecided, P(beat) {p:.3f}: +{w} run(s) could settle worse"
    return "4", 0.0, "undecided, delta <= 0: out of reach in the time left"


def _pick_extra(entries, baseline, base_for, report, cost, dropped, known, noise_known):
    """The one chain --auto-repeat may add: the best candidate that a repeat can settle."""
    if not cost.fits(1):
        return None, ""
    cands = [e for e in entries.values() if e["name"] in known and e["name"] not in dropped and e.get("n")]
    if not noise_known:
        best = max(cands, key=lambda e: e.get("delta") if e.get("delta") is not None else -1e9, default=None)
        return (best["name"], "no noise estimate yet: repeat the best") if best else (None, "")
    up = [e for e in cands if e.get("verdict") == inference.UNDECIDED and (e.get("delta") or 0) > 0
          and e.get("runs_needed") is not None and cost.fits(e["runs_needed"])]
    if up:
        best = max(up, key=lambda e: e["p_beat"] or 0.0)
        return best["name"], f"undecided, P(beat) {best['p_beat']:.3f}: +{best['runs_needed']} run(s) could settle it"
    if base_for and baseline in known:
        return baseline, "a candidate needs baseline runs to settle"
    down = [(e, _worse_runs(e, report)) for e in cands if e.get("verdict") == inference.UNDECIDED and (e.get("delta") or 0) <= 0]
    down = [(e, w) for e, w in down if w is not None and cost.fits(w)]
    if down:
        e, w = min(down, key=lambda t: t[0]["p_beat"] or 0.0)
        return e["name"], f"undecided, P(beat) {e['p_beat']:.3f}: +{w} run(s) could settle worse"
    return None, ""


# --- value of information: which next chain most raises the settled verdicts expected by the end --

PRIOR_EFFECT_SD = 2.0  # points: a queued idea's true effect ~ N(0, 2^2) before its first run
VOI_MAX_CHAINS = 12  # plan at most this many chains ahead
VOI_MIN_GAIN = 1e-3
EXTRA_MIN_GAIN = 0.01  # a chain the worker queues itself must add at least this many expected verdicts
FUTILITY_SAVES = 0.35  # of a chain: a stop at k = 4 of 12 saves 2/3 of the eval's sampling (~58% of a chain)  # below this expected gain, fall back to the tier order


def _ncdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@dataclass(frozen=True)
class _Arm:
    name: str
    n: int  # full runs so far (0: a queued idea not yet run)
    delta: float  # observed delta (0 for a new idea)
    cap: int  # most further chains it may get (0: settled worse, futile, or nothing queued)


class _Voi:
    """Expected number of settled verdicts (`better` or `worse`) at the end of the budget for an
    allocation of the R chains that fit: each arm's final delta is predicted from a normal prior
    N(0, PRIOR_EFFECT_SD^2) on its true effect, updated by its runs; its final verdict settles
    when |delta| >= t_{1-alpha/m', nu'} s sqrt(1/(n+r) + 1/n_b), with m' the variants tried by
    then (every new idea tried raises it for all) and nu' the pooled dof by then. The verdict
    rules are compare's; this only predicts them."""

    def __init__(self, s: float, nu: int, n_b: int, m: int, alpha: float, var_b: Optional[float] = None,
                 nu_local: Optional[int] = None):
        # n_b: local baseline runs (looks count them); var_b: variance of the baseline mean
        # (compare's se_mean^2: the published mean's offset included); nu_local: the store's repeat dof
        self.s, self.nu, self.n_b, self.m, self.alpha = s, nu, n_b, m, alpha
        self.var_b = var_b if var_b is not None else s**2 / max(n_b, 1)
        self.nu_local = nu_local
        self._t: dict[tuple, float] = {}

    def crit(self, m: int, nu: int, j: Optional[int] = None) -> float:
        """The verdict's critical t at look j (compare's rule: Bonferroni over m, alpha spent over
        the looks, none before enough local dof); inf when no verdict is possible there."""
        local = None if self.nu_local is None else self.nu_local + (nu - self.nu)
        key = (m, nu, j, local)
        if key not in self._t:
            if j is None or local is None:
                self._t[key] = inference.t_ppf(inference.bonferroni_level(m, self.alpha), nu)
            else:
                lvl = inference.look_level(j, m, local, self.alpha)
                self._t[key] = inference.upper_t(lvl, nu) if lvl > 0 else math.inf
        return self._t[key]

    def p_settle(self, a: _Arm, r: int, m: int, nu: int) -> float:
        s, n = self.s, a.n + r
        if n == 0:
            return 0.0
        c = self.crit(m, nu, n + self.n_b if self.nu_local is not None else None)
        if not math.isfinite(c):
            return 0.0
        thr = c * math.sqrt(s**2 / n + self.var_b)
        s0 = PRIOR_EFFECT_SD
        if a.n:
            v_post = 1.0 / (1.0 / s0**2 + a.n / s**2)
            mu_post = v_post * a.n * a.delta / s**2
            if r == 0:  # no more runs of its own: only s moves, with the dof the other runs add
                extra = nu - self.nu
                if extra <= 0:
                    return float(abs(a.delta) >= thr)
                from scipy.special import chdtr

                # s'^2 = (nu s^2 + s^2 chi2_extra) / nu'; settled while s' <= s |delta| / thr
                x = nu * (abs(a.delta) / thr) ** 2 - self.nu
                return float(chdtr(extra, x)) if x > 0 else 0.0
            w = r / n
            mean = (a.n * a.delta + r * mu_post) / n
            sd = w * math.sqrt(v_post + s**2 / r)
        else:
            mean, sd = 0.0, math.sqrt(s0**2 + s**2 / r)
        return _ncdf((mean - thr) / sd) + _ncdf((-thr - mean) / sd)

    def value_now(self, arms: Sequence[_Arm]) -> float:
        return sum(self.p_settle(a, 0, self.m, self.nu) for a in arms)

    def curve(self, a: _Arm, top: int, m: int, nu: int) -> list[float]:
        return [self.p_settle(a, r, m, nu) if r <= a.cap else -1.0 for r in range(top + 1)]

    def best(self, arms: Sequence[_Arm], chains: int) -> tuple[float, list[int]]:
        """The allocation of the `chains` runs that fit with the highest expected settled count.
        With k new ideas tried, m' = m + k and nu' = nu + chains - k are fixed, so the count is a
        sum over arms: a small knapsack per k. Runs may also go to none of the arms (a settled
        variant, the baseline): they add dof only. New ideas are tried in queue order."""
        old = [i for i, a in enumerate(arms) if a.n]
        new = [i for i, a in enumerate(arms) if not a.n and a.cap > 0]
        best_v, best_a = -1.0, [0] * len(arms)
        for k in range(0, min(len(new), chains) + 1):
            m, nu = self.m + k, self.nu + chains - k
            items = [(i, self.curve(arms[i], chains, m, nu), 0) for i in old]
            items += [(i, self.curve(arms[i], chains, m, nu), 1) for i in new[:k]]
            # dp[b] = (value, allocation) using at most b runs over the items so far
            dp = [(0.0, ())] * (chains + 1)
            for _, f, lo in items:
                nxt = [(-1e9, ())] * (chains + 1)
                for b in range(chains + 1):
                    for r in range(lo, b + 1):
                        if f[r] < 0:
                            break
                        v = dp[b - r][0] + f[r]
                        if v > nxt[b][0] + 1e-12:
                            nxt[b] = (v, dp[b - r][1] + (r,))
                dp = nxt
            v, rs = dp[chains]
            if v > best_v + 1e-12:
                alloc = [0] * len(arms)
                for (i, _, _), r in zip(items, rs):
                    alloc[i] = r
                best_v, best_a = v, alloc
        return best_v, best_a


def _with_baseline_runs(voi: _Voi, r_b: int, ref_n: Optional[int], offset_sd: float, use_ref: bool) -> _Voi:
    """The same valuation after r_b more local baseline runs: a smaller variance of the baseline
    mean (compare's inference.baseline_var: the published mean's offset shrinks away), more dof,
    later looks."""
    if r_b == 0:
        return voi
    n_b = voi.n_b + r_b
    dof = r_b - (1 if voi.n_b == 0 else 0)
    out = _Voi(voi.s, voi.nu + dof, n_b, voi.m, voi.alpha,
               var_b=inference.baseline_var(voi.s**2, n_b, ref_n, offset_sd, use_ref),
               nu_local=None if voi.nu_local is None else voi.nu_local + dof)
    return out


def _best_with_baseline(voi: _Voi, arms, chains: int, base_cap: int, ref_n, offset_sd, use_ref):
    """(value, candidate allocation, baseline runs) of the best plan when up to base_cap of the
    chains may go to the baseline: its runs tighten every candidate's comparison at once."""
    best = (-1.0, [0] * len(arms), 0)
    for r_b in range(0, min(base_cap, chains) + 1):
        sub = _with_baseline_runs(voi, r_b, ref_n, offset_sd, use_ref)
        v, alloc = sub.best(arms, chains - r_b) if chains - r_b > 0 else (sub.value_now(arms), [0] * len(arms))
        if v > best[0] + 1e-12:
            best = (v, alloc, r_b)
    return best


def _voi_pick(queued, entries, report, baseline, cost, dropped, auto_repeat,
              baseline_known: bool = False) -> Optional[tuple[str, str, bool, float]]:
    """(variant, why, full, gain) of the next chain by value of information, or None (fall back to the
    tiers): the allocation of the chains that fit with the most verdicts expected to settle by the
    end; from it, a new idea's first run if it tries any (queue order), else the repeat whose runs
    raise its chance to settle the most. full: a repeat run to settle `worse` (delta < 0), whose
    evaluation futility must not stop (a futility drop would forfeit the very verdict it is for)."""
    chains = 0
    while chains < VOI_MAX_CHAINS and cost.fits(chains + 1):
        chains += 1
    if chains == 0 or cost.usable is None:
        return None
    nz, b, bf = report["noise"], report["baseline"], report["bonferroni"]
    if not nz.get("s") or not nz.get("nu") or not b.get("n"):
        return None
    n_queued: dict[str, int] = {}
    for q in queued:
        if q.variant != baseline and q.variant not in dropped:
            n_queued[q.variant] = n_queued.get(q.variant, 0) + 1
    extra = chains if auto_repeat else 0
    arms = []
    for e in entries.values():
        if e["name"] == baseline or not e.get("n") or e.get("delta") is None:
            continue
        closed = e["name"] in dropped or e.get("verdict") == inference.WORSE
        cap = 0 if closed else min(chains, n_queued.get(e["name"], 0) + extra)
        arms.append(_Arm(e["name"], int(e["n"]), float(e["delta"]), cap))
    seen = {a.name for a in arms}
    for q in queued:
        if q.variant in n_queued and q.variant not in seen:
            seen.add(q.variant)
            arms.append(_Arm(q.variant, 0, 0.0, min(chains, n_queued[q.variant] + extra)))
    rule = b.get("se_mean") is not None and "nu_local" in nz  # compare's verdict rule
    # the baseline's runs count when compare combines local runs with the published mean
    base_queued = sum(1 for q in queued if q.variant == baseline)
    base_cap = (base_queued + (extra if baseline_known else 0)) if rule and baseline else 0
    if not any(a.cap for a in arms) and not base_cap:
        return None
    voi = _Voi(float(nz["s"]), int(nz["nu"]), int(b.get("n_local", 0)) if rule else int(b["n"]),
               int(bf.get("m") or 0), float(bf.get("alpha") or inference.ALPHA),
               var_b=float(b["se_mean"]) ** 2 if rule else None, nu_local=int(nz["nu_local"]) if rule else None)
    ref = b.get("reference") or {}
    use_ref = b.get("source") in ("reference", "runs+reference")
    now = voi.value_now(arms)
    best, alloc, r_b = _best_with_baseline(voi, arms, chains, base_cap, ref.get("n"),
                                           float(ref.get("offset_sd") or 0.0), use_ref)
    if r_b:
        plan_txt = ", ".join([f"{baseline} x{r_b}"] + [f"{a.name} x{r}" for a, r in zip(arms, alloc) if r])
        if best - now < VOI_MIN_GAIN:
            return None
        return baseline, (f"{chains} chain(s) fit; best plan {plan_txt}: {best:.2f} verdicts expected to settle "
                          f"(now {now:.2f}); a baseline run first: it tightens every comparison"), True, best - now
    voi = _with_baseline_runs(voi, 0, None, 0.0, False)
    k = sum(1 for a, r in zip(arms, alloc) if a.n == 0 and r > 0)
    m, nu = voi.m + k, voi.nu + chains - k
    # A futility stop forfeits the run's score (and drops the variant, not a verdict); it pays only
    # when the time it saves (FUTILITY_SAVES of a chain, a stop at k = 4) buys one more chain.
    slack = cost.usable - ((chains - 1) * cost.median + cost.high)
    stop_pays = slack + FUTILITY_SAVES * cost.median >= cost.median
    new = [(a, r) for a, r in zip(arms, alloc) if a.n == 0 and r > 0]
    plan_txt = ", ".join(f"{a.name} x{r}" for a, r in zip(arms, alloc) if r) or "no new idea"
    head = f"{chains} chain(s) fit; best plan {plan_txt}: {best:.2f} verdicts expected to settle (now {now:.2f})"
    if new:
        if best - now < VOI_MIN_GAIN:
            return None
        return new[0][0].name, f"{head}; first run of a new idea", not stop_pays, best - now
    gain = [(voi.p_settle(a, r, m, nu) - voi.p_settle(a, 0, m, nu), a) for a, r in zip(arms, alloc) if r]
    g, a = max(gain, key=lambda t: t[0]) if gain else (0.0, None)
    if g < VOI_MIN_GAIN:
        # No run changes a verdict's chances, and a new idea would raise m for every verdict: the
        # chains go to repeats (dof for the pooled s, tighter intervals), the strongest candidate first.
        open_ = [x for x in arms if x.n and x.cap]
        if not open_:
            return None
        a = max(open_, key=lambda x: x.delta)
        return (a.name, f"{head}; no new idea (m would rise for every verdict): a repeat of {a.name}",
                a.delta < 0 or not stop_pays, g)
    return a.name, f"{head}; a repeat of {a.name} raises its chance to settle by {g:.2f}", a.delta < 0 or not stop_pays, g
