"""Which queued chain next: `fifo` (the queue as it is) or `adaptive` (settle the most questions).

A pure function of the queue, the compare report (opsdctl.compare.build_report over the
store's scored runs) and the time left. The worker's gate and the simulator both call `plan`.

What the adaptive policy may do on its own (and nothing else):
1. re-order the queued chains;
2. skip queued chains, each with a reason, in exactly two cases: the variant's verdict is
   already `worse`, or one of its evaluations was stopped as futile;
3. with --auto-repeat only: queue ONE extra chain at a time (a fresh seed of an existing
   variant, same code snapshot) when no queued chain can settle anything, for the candidate
   (or the baseline) that the rules below rank first and whose runs fit in the time left.
It never cancels a running chain, never changes recipes, never skips the first run of a
variant, and a user's --priority always ranks first.

Tiers, in this order (ties: higher priority, then tier key, then queue order):
  0  the baseline's first run, when there is no baseline at all (no store runs, no reference);
  1  the first run of every variant without a full run yet (queue order);
  2  repeats that can settle a verdict in the time left:
     2a candidates with delta > 0, `undecided`, whose runs_needed (stats.runs_needed) chains
        fit; by P(beat), highest first; only as many repeats as runs_needed;
        also baseline repeats (when the baseline is measured by store runs) if a candidate
        needs baseline runs too and the runs both arms need fit; ranked with that candidate;
     2b candidates with delta <= 0, `undecided`, whose runs to settle `worse` (runs_needed on
        -delta) fit; by P(beat), lowest first;
     2c without a noise estimate (nu = 0, no prior): repeats of the best delta first (a
        second run is what makes a noise estimate);
  3  everything else (settled `better` variants, undecided ones out of reach), queue order.
Skipped: variants `worse`, and variants with a stopped-futile chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from opsdctl import stats

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

    def to_json(self) -> dict:
        return {"order": self.order, "skips": {str(k): v for k, v in self.skips.items()},
                "extra": self.extra, "extra_why": self.extra_why,
                "slots": [{"chain_id": s.chain_id, "variant": s.variant, "tier": s.tier, "why": s.why} for s in self.slots]}


_TIER_RANK = {"0": 0, "1": 1, "2a": 2, "2b": 3, "2c": 4, "3": 5}


def _fits(chains: Optional[int], chain_s: Optional[float], usable_s: Optional[float]) -> bool:
    if chains is None:
        return False
    if usable_s is None or chain_s is None:
        return True
    return chains * chain_s <= usable_s


def _worse_runs(e: dict, report: dict) -> Optional[int]:
    """Extra candidate runs that would settle `worse` if delta and s hold (runs_needed on -delta)."""
    nz, b = report["noise"], report["baseline"]
    m = report["bonferroni"]["m"]
    if e.get("delta") is None or e["delta"] >= 0 or nz.get("s") is None or not m:
        return None
    rn = stats.runs_needed(-e["delta"], nz["s"], e["n"], b["n"], nz["nu"], m)
    return rn.extra


def plan(
    queued: Sequence[QueuedItem],
    report: Optional[dict],
    *,
    policy: str = ADAPTIVE,
    baseline: Optional[str] = None,
    usable_s: Optional[float] = None,
    chain_s: Optional[float] = None,
    dropped: Optional[Mapping[str, str]] = None,
    auto_repeat: bool = False,
    known_variants: Sequence[str] = (),
) -> Plan:
    """Order (and skip) the queued chains. `chain_s`: one chain's high-quantile estimate;
    `dropped`: variant -> reason for variants with a stopped-futile chain; `known_variants`:
    variants that may receive an --auto-repeat chain (every variant with a run)."""
    if policy == FIFO:
        return Plan([q.chain_id for q in queued], slots=[Slot(q.chain_id, q.variant, "-", "queue order") for q in queued])
    dropped = dict(dropped or {})
    entries = {e["name"]: e for e in (report or {}).get("variants", []) if not e.get("partial")}
    base = (report or {}).get("baseline") or {}
    base_source = base.get("source")
    base_has_runs = base_source == "runs"
    noise_known = (report or {}).get("noise", {}).get("s") is not None

    # Candidates that could be settled with baseline runs too (they need both arms).
    base_for = [e for e in entries.values()
                if e.get("verdict") == stats.UNDECIDED and e.get("needs_baseline_runs") and base_has_runs
                and _fits(2 * (e.get("runs_needed_both_arms") or 0) or None, chain_s, usable_s)]
    base_key = max((e["p_beat"] or 0.0) for e in base_for) if base_for else None

    taken: dict[str, int] = {}
    slots: list[tuple[tuple, Slot]] = []
    skips: dict[int, str] = {}
    for pos, q in enumerate(queued):
        j = taken.get(q.variant, 0)
        e = entries.get(q.variant)
        n = (e or {}).get("n", 0) if q.variant != baseline else base.get("n", 0) if base_has_runs else 0
        tier, key, why = "3", 0.0, "nothing to settle"
        if q.variant in dropped:
            skips[q.chain_id] = dropped[q.variant]
            continue
        if e is not None and e.get("verdict") == stats.WORSE:
            skips[q.chain_id] = (f"verdict worse (P(beat) = {e['p_beat']:.3g} <= "
                                 f"{report['bonferroni']['worse_at']:.3g}): no more runs for it")
            continue
        if q.variant == baseline:
            if base_source is None and j == 0:
                tier, why = "0", "no baseline yet: every delta needs it"
            elif base_key is not None and j == 0:
                tier, key, why = "2a", -base_key, "a candidate needs baseline runs to settle"
            else:
                why = "baseline: enough for now"
        elif n == 0:
            if j == 0:
                tier, why = "1", "first run of a new variant"
            else:
                why = "repeat of a variant not yet run"
        elif e is not None and not noise_known:
            if j == 0:
                tier, key, why = "2c", -(e.get("delta") or e.get("mean") or 0.0), "no noise estimate yet: repeat the best"
        elif e is not None and e.get("verdict") == stats.UNDECIDED:
            delta, p = e.get("delta"), e.get("p_beat")
            need = e.get("runs_needed")
            if delta is not None and delta > 0 and need is not None and _fits(need, chain_s, usable_s) and j < need:
                tier, key, why = "2a", -(p or 0.0), f"undecided, P(beat) {p:.3f}: +{need} run(s) could settle it"
            elif delta is not None and delta > 0 and e.get("needs_baseline_runs") and e in base_for and j == 0:
                tier, key, why = "2a", -(p or 0.0), "undecided: settles with baseline runs too"
            elif delta is not None and delta <= 0:
                w = _worse_runs(e, report)
                if w is not None and _fits(w, chain_s, usable_s) and j < w:
                    tier, key, why = "2b", (p or 0.0), f"undecided, P(beat) {p:.3f}: +{w} run(s) could settle worse"
                else:
                    why = "undecided, out of reach in the time left"
            else:
                why = "undecided, out of reach in the time left"
        elif e is not None and e.get("verdict") == stats.BETTER:
            why = "settled better: extra runs only tighten it"
        taken[q.variant] = j + 1
        slots.append(((-q.priority, _TIER_RANK[tier], key, pos), Slot(q.chain_id, q.variant, tier, why)))
    slots.sort(key=lambda t: t[0])
    ordered = [s for _, s in slots]
    out = Plan([s.chain_id for s in ordered], skips, slots=ordered)

    if auto_repeat and not any(s.tier in ("0", "1", "2a", "2b", "2c") for s in ordered):
        out.extra, out.extra_why = _pick_extra(entries, base, baseline, base_for, report, chain_s, usable_s,
                                               dropped, set(known_variants), noise_known)
    return out


def _pick_extra(entries, base, baseline, base_for, report, chain_s, usable_s, dropped, known, noise_known):
    """The one chain --auto-repeat may add: the best candidate that a repeat can settle."""
    if not _fits(1, chain_s, usable_s):
        return None, ""
    cands = [e for e in entries.values() if e["name"] in known and e["name"] not in dropped and e.get("n")]
    if not noise_known:
        best = max(cands, key=lambda e: e.get("delta") if e.get("delta") is not None else -1e9, default=None)
        return (best["name"], "no noise estimate yet: repeat the best") if best else (None, "")
    up = [e for e in cands if e.get("verdict") == stats.UNDECIDED and (e.get("delta") or 0) > 0
          and e.get("runs_needed") is not None and _fits(e["runs_needed"], chain_s, usable_s)]
    if up:
        best = max(up, key=lambda e: e["p_beat"] or 0.0)
        return best["name"], f"undecided, P(beat) {best['p_beat']:.3f}: +{best['runs_needed']} run(s) could settle it"
    if base_for and baseline in known:
        return baseline, "a candidate needs baseline runs to settle"
    down = [(e, _worse_runs(e, report)) for e in cands if e.get("verdict") == stats.UNDECIDED and (e.get("delta") or 0) <= 0]
    down = [(e, w) for e, w in down if w is not None and _fits(w, chain_s, usable_s)]
    if down:
        e, w = min(down, key=lambda t: t[0]["p_beat"] or 0.0)
        return e["name"], f"undecided, P(beat) {e['p_beat']:.3f}: +{w} run(s) could settle worse"
    return None, ""
