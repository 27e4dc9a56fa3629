"""Which queued chain next: `fifo` (the queue as it is) or `adaptive` (`opsdctl advise`'s ranking first).

A pure function of the queue, the compare report (opsdctl.stats.compare.build_report over the
store's scored runs) and the time left. The worker's gate and the simulator both call `plan`.

What the adaptive policy may do on its own (and nothing else):
1. re-order the queued chains;
2. skip queued chains, each with a reason, in exactly two cases: the variant's verdict is
   already `worse`, or one of its evaluations was stopped as futile;
3. with --auto-repeat only: propose ONE extra chain at a time (a fresh seed of an existing
   variant, same code snapshot): the repeat, baseline run or re-eval `opsdctl advise` ranks first
   (see below), or, without a ranking (no noise estimate yet), for the candidate the tiers rank first
   and whose runs fit in the time left. The gate queues it only once the user's queued chains
   have run (before them with [planner] auto_repeat_first), up to [planner] auto_repeat_max when
   the user sets one.
It never cancels a running chain, never changes recipes, never skips the first run of a
variant, and a user's --priority always ranks first.

Tiers, in this order (ties: higher priority, then tier key, then queue order):
  0  the baseline's first run, when there is no baseline at all (no store runs, no reference);
  1  the first run of every variant without a full run yet (queue order; see "value of
     information" below for when a ranked action goes first);
  2  repeats that can settle a verdict in the time left:
     2a candidates with delta > 0, `undecided`, whose runs_needed (inference.rule_runs_needed) chains
        fit; by P(beat), highest first; only as many repeats as runs_needed;
        also baseline runs if a candidate needs baseline runs too and the runs both arms need
        fit (against the published reference as well: local baseline runs remove its setup
        offset); ranked with that candidate;
     2b candidates with delta <= 0, `undecided`, whose runs to settle `worse` (compare's
        runs_needed_worse) fit; by P(beat), lowest first;
     2c without a noise estimate (nu = 0, no prior): repeats of the best delta first (a
        second run is what makes a noise estimate);
  3  other repeats of undecided candidates with delta > 0 (out of reach in the time left, or
     beyond the runs that would settle them): by P(beat), highest first (their runs are still
     the most informative about a winner);
  4  everything else (settled `better` variants, undecided ones with delta <= 0 out of reach,
     second chains of variants not yet run, the baseline when nothing needs it), queue order.
Skipped: variants `worse`, and variants with a stopped-futile chain.

Value of information (tier "v", ahead of the tiers): the worker passes `opsdctl advise`'s ranking
(opsdctl.plan.advise: each action's expected gain of the submission's official score, per minute,
`stop` above whatever is not worth its minutes) and the pick is its first action the worker can
take: a queued chain of that variant (a repeat, the baseline, a new idea's first run) runs first;
with --auto-repeat, one more chain of a variant with a run is queued and run first
(Plan.extra_first), or a re-eval of a checkpoint of it (Plan.extra_reeval: fresh eval samples,
opsdctl.plan.reeval) when the ranking puts one first and the checkpoint may be evaluated again.
Screens are the user's to queue. When `stop` ranks first, the
queued chains run in the tier order and nothing is added. The tiers decide alone without a noise
estimate (no ranking) or when a baseline run is missing altogether; [planner] try_every_variant
(worker --try-every-variant) turns the ranking off for users who want every idea tried first.
Plan.full_eval names the variant whose evaluation futility must not stop: the ranked repeat, whose
full score is the observation it was ranked for.

Chains running now (PlanInputs.in_flight, the worker's and any other worker's on the store) are
observations on their way: a queued chain of their variant counts after them (a first run that
runs makes the queued second one a repeat), and the ranking's pick passes over their variant. With
several chains at once (gpus_per_chain, Ray) the free slots otherwise all took the same ranked
first run: four 1-GPU slots ran the x2 queue's two baseline chains, then two of each idea, and
tried half the ideas in a session (docs/planner.md).

Objective (worker --objective, [planner] objective): `submission` (the default) is the above;
`verdicts` turns the ranking off (the tiers decide, as with try_every_variant) and holds the arms
tried to what the session's runs can settle (new_arms_allowed: a first run beyond that waits, in
tier 4, with its reason), and --auto-repeat's chain goes before queued chains that settle nothing
(Plan.extra_first; before the user's own only with auto_repeat_first); when nothing is left to
settle, --auto-repeat takes the ranking's pick (after the queued chains), so no budget is left
idle that the bet could use. It buys verdicts at the submission's expense: fewer ideas are tried.

"Fits in the time left": r more chains fit when (r - 1) x median + high <= usable seconds (the
chains before the last take their median; the last must still pass admission with its high
quantile). `runs_needed` assumes the observed delta and s hold (inference.rule_runs_needed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import AbstractSet, Mapping, Optional, Sequence

from opsdctl.config import PLANNER_OBJECTIVES, PLANNER_POLICIES
from opsdctl.plan.advise import Action, Advice
from opsdctl.stats import inference
from opsdctl.stats.report import Entry, Report

POLICIES = PLANNER_POLICIES
FIFO, ADAPTIVE = POLICIES
# What the adaptive policy spends the budget on: the submission's expected official score
# (`opsdctl advise`'s ranking), or verdicts (the tiers, with new ideas held to the arms the time
# left can settle).
OBJECTIVES = PLANNER_OBJECTIVES
SUBMISSION, VERDICTS = OBJECTIVES
# objective verdicts: at most one arm (the baseline counts) per four runs of the session (done, plus
# the chains that still fit). Chosen a priori (two arms in a ~8-chain session: the most runs on one
# comparison); 1/2 and 3/8 measured no better, and counting only the arms that still look
# settle-able measured worse (docs/planner.md).
ARMS_PER_CHAIN = 0.25


@dataclass(frozen=True)
class QueuedItem:
    chain_id: int
    variant: str  # label, as in the compare report
    priority: int = 0


class Tier(str, enum.Enum):
    """The tiers of the module docstring, in rank order (their codes are what --json prints)."""

    VALUE = "v"  # `opsdctl advise`'s pick
    NO_BASELINE = "0"
    FIRST_RUN = "1"
    SETTLES = "2a"
    SETTLES_WORSE = "2b"
    NO_NOISE = "2c"
    OUT_OF_REACH = "3"
    REST = "4"
    QUEUE_ORDER = "-"  # fifo: no tiers

    def __str__(self) -> str:
        return self.value


_TIER_RANK = {t: rank for rank, t in enumerate(Tier, start=-1)}
# The tiers that still run before --auto-repeat may add a chain.
_BEFORE_EXTRA = frozenset({Tier.NO_BASELINE, Tier.FIRST_RUN, Tier.SETTLES, Tier.SETTLES_WORSE, Tier.NO_NOISE})


@dataclass(frozen=True)
class Slot:
    chain_id: int
    variant: str
    tier: Tier
    why: str


@dataclass(frozen=True)
class PlanInputs:
    """What `plan` weighs besides the queue and the report. `chain_s` / `chain_median_s`: one
    chain's high-quantile and median estimates; `dropped`: variant -> reason for variants with a
    stopped-futile chain; `known_variants`: variants that may receive an --auto-repeat chain
    (every variant with a run); `advice`: `opsdctl advise`'s ranking (opsdctl.plan.advise),
    which then makes the pick."""

    policy: str = ADAPTIVE
    baseline: Optional[str] = None
    usable_s: Optional[float] = None
    chain_s: Optional[float] = None
    chain_median_s: Optional[float] = None
    dropped: Optional[Mapping[str, str]] = None
    auto_repeat: bool = False
    known_variants: Sequence[str] = ()
    voi: bool = True
    advice: Optional[Sequence[Advice]] = None
    reevals: Sequence[str] = ()  # variants with a checkpoint --auto-repeat may re-evaluate (opsdctl.plan.reeval)
    objective: str = SUBMISSION
    slots: int = 1  # chains the worker runs at once (opsdctl.plan.slots): r chains take ceil(r / slots) turns
    in_flight: Mapping[str, int] = field(default_factory=dict)  # candidate -> its chains running now (no score yet)


@dataclass
class Plan:
    order: list[int]  # chain ids, in the order to try them
    skips: dict[int, str] = field(default_factory=dict)  # chain id -> reason
    extra: Optional[str] = None  # --auto-repeat: the variant to queue one more chain of
    extra_why: str = ""
    extra_reeval: bool = False  # ... a re-eval of its checkpoint (fresh samples), not a training
    slots: list[Slot] = field(default_factory=list)
    extra_first: bool = False  # the extra chain goes before the queued ones (the value-of-information pick)
    full_eval: list[str] = field(default_factory=list)  # variants whose evaluations futility must not stop

    def to_json(self) -> dict:
        return {"order": self.order, "skips": {str(k): v for k, v in self.skips.items()},
                "extra": self.extra, "extra_why": self.extra_why, "extra_reeval": self.extra_reeval,
                "extra_first": self.extra_first, "full_eval": self.full_eval,
                "slots": [{"chain_id": s.chain_id, "variant": s.variant, "tier": s.tier.value, "why": s.why} for s in self.slots]}


class _Cost:
    """Do r more chains fit? (turns - 1) x median + high <= usable, with r chains taking
    turns = ceil(r / slots) (None: no budget)."""

    def __init__(self, high_s: Optional[float], median_s: Optional[float], usable_s: Optional[float], slots: int = 1):
        self.high = high_s
        self.median = median_s if median_s is not None else high_s
        self.usable = usable_s
        self.slots = max(1, slots)

    def fits(self, chains: Optional[int]) -> bool:
        if chains is None or chains < 1:
            return False
        if self.usable is None or self.high is None:
            return True
        return (-(-chains // self.slots) - 1) * self.median + self.high <= self.usable

    def most(self) -> Optional[int]:
        """The most chains that fit (None: no budget, no bound)."""
        if self.usable is None or self.high is None:
            return None
        if self.high > self.usable:
            return 0
        return self.slots * (1 + int((self.usable - self.high) // self.median)) if self.median > 0 else None


def new_arms_allowed(report: Optional[Report], cost: _Cost) -> Optional[int]:
    """Objective verdicts: how many more variants may get a first run now (None: no bound).

    A verdict needs repeat dof (none before inference.MIN_LOCAL_DOF) and runs enough on both sides
    of one comparison, and every arm tried takes runs from both: with R runs in a session and A
    arms there are R - A dof, and a verdict's power goes with the runs of its two arms. So the
    arms tried (the baseline counts as one, whether or not it has run) are held to
    ARMS_PER_CHAIN of the session's runs, those done plus the chains that still fit, and never
    below two: a session of ~8 chains tries one idea beside the baseline, and goes on to another
    only once the chains left would pay for it."""
    more = cost.most()
    if more is None:
        return None
    tried = [e for e in report.full if e.n] if report is not None else []
    base_runs = report.baseline.n_local if report is not None else 0
    cap = max(2, int((sum(e.n for e in tried) + base_runs + more) * ARMS_PER_CHAIN))
    return max(0, cap - 1 - len(tried))


def plan(queued: Sequence[QueuedItem], report: Optional[Report], inputs: PlanInputs = PlanInputs()) -> Plan:
    """Order (and skip) the queued chains (PlanInputs says what else it weighs)."""
    if inputs.policy == FIFO:
        return Plan([q.chain_id for q in queued], slots=[Slot(q.chain_id, q.variant, Tier.QUEUE_ORDER, "queue order") for q in queued])
    baseline, auto_repeat, known_variants, voi, advice = (inputs.baseline, inputs.auto_repeat, inputs.known_variants,
                                                          inputs.voi, inputs.advice)
    cost = _Cost(inputs.chain_s, inputs.chain_median_s, inputs.usable_s, inputs.slots)
    verdicts = inputs.objective == VERDICTS
    if verdicts:
        voi = False  # the tiers decide: they rank by what settles, advise by the submission
    new_arms = new_arms_allowed(report, cost) if verdicts else None
    dropped = dict(inputs.dropped or {})
    entries = {e.name: e for e in report.full} if report is not None else {}
    base = report.baseline if report is not None else None
    base_source = base.source if base is not None else None
    noise_known = report is not None and report.noise.s is not None

    # Candidates that settle only with baseline runs too: local baseline runs remove the published
    # mean's setup offset, so this holds against the reference as well as against store runs.
    base_for = {e.name: e for e in entries.values()
                if e.verdict == inference.UNDECIDED and e.needs_baseline_runs
                and base_source in ("runs", "runs+reference", "reference")
                and cost.fits(2 * (e.runs_needed_both_arms or 0))}
    base_key = max((e.p_beat or 0.0) for e in base_for.values()) if base_for else None

    ctx = _Context(base_source, baseline, base_for, base_key, noise_known, cost)
    # A chain running now is an observation on its way: the queue's chains of its variant count
    # after it, and the ranking's pick passes over it (advise valued that action without it).
    taken: dict[str, int] = {v: int(n) for v, n in inputs.in_flight.items() if n > 0}
    live = set(taken)
    slots: list[tuple[tuple, Slot]] = []
    skips: dict[int, str] = {}
    for pos, q in enumerate(queued):
        if q.variant in dropped:
            skips[q.chain_id] = dropped[q.variant]
            continue
        e = entries.get(q.variant)
        if e is not None and e.verdict == inference.WORSE:
            at = e.worse_at if e.worse_at is not None else report.spending.worse_at
            skips[q.chain_id] = f"verdict worse (P(beat) = {e.p_beat:.3g} <= {at:.3g}): no more runs for it"
            continue
        j = taken.get(q.variant, 0)
        taken[q.variant] = j + 1
        tier, key, why = _classify(q, j, e, ctx)
        if tier is Tier.FIRST_RUN and new_arms is not None:
            if new_arms <= 0:
                tier, why = Tier.REST, "first run held back: the runs left go to the arms tried (objective verdicts)"
            new_arms -= 1
        slots.append(((-q.priority, _TIER_RANK[tier], key, pos), Slot(q.chain_id, q.variant, tier, why)))
    pick = None
    if advice is not None and voi and not any(t[1].tier is Tier.NO_BASELINE for t in slots):
        pick = _advice_pick(advice, {t[1].variant for t in slots}, dropped, auto_repeat, set(known_variants),
                            set(inputs.reevals), live)
        if pick is not None and pick[0] is None:  # stop: nothing is worth its minutes; no chain of our own
            slots.sort(key=lambda t: t[0])
            ordered = [s for _, s in slots]
            return Plan([s.chain_id for s in ordered], skips, slots=ordered, extra_why=pick[1])
    if pick is not None:
        variant, why, full, reeval = pick
        first = None if reeval else next((t for t in slots if t[1].variant == variant), None)
        if first is not None:
            slots.remove(first)
            key, sl = first
            slots.append(((key[0], _TIER_RANK[Tier.VALUE], 0.0, key[3]), Slot(sl.chain_id, sl.variant, Tier.VALUE, why)))
    slots.sort(key=lambda t: t[0])
    ordered = [s for _, s in slots]
    out = Plan([s.chain_id for s in ordered], skips, slots=ordered)
    if pick is not None:
        out.full_eval = [pick[0]] if pick[2] else []
        if not any(s.tier is Tier.VALUE for s in ordered):
            out.extra, out.extra_why, out.extra_first, out.extra_reeval = pick[0], pick[1], True, pick[3]
        return out
    if auto_repeat and not any(s.tier in _BEFORE_EXTRA for s in ordered):
        out.extra, out.extra_why = _pick_extra(entries, baseline, base_for, report, cost, dropped,
                                               set(known_variants), noise_known)
        # objective verdicts: a run that can settle one goes before queued chains that settle nothing
        out.extra_first = verdicts and out.extra is not None
        if verdicts and out.extra is None and advice is not None:
            # nothing left to settle: the bet's ranking spends what is left (a re-eval in the last half hour)
            bet = _advice_pick(advice, set(), dropped, auto_repeat, set(known_variants), set(inputs.reevals), live)
            if bet is not None and bet[0] is not None:
                out.extra, out.extra_why, out.extra_reeval = bet[0], f"{bet[1]} (nothing left to settle)", bet[3]
                out.full_eval = [bet[0]] if bet[2] else []
    return out


def _advice_pick(advice: Sequence[Advice], queued: set, dropped: Mapping[str, str], auto_repeat: bool,
                 known: set, reevals: set, live: AbstractSet[str] = frozenset()) -> Optional[tuple[Optional[str], str, bool, bool]]:
    """(variant, why, full, reeval) from `opsdctl advise`'s ranking: its first action the worker
    can take (a queued chain of that variant first; with --auto-repeat, one more chain of a
    variant with a run, or a re-eval of a checkpoint of it that may be evaluated again);
    (None, why, False, False) when `stop` ranks above every such action; None without any (the
    tiers order). Screens are the user's to queue. Variants in `live` (a chain of theirs runs
    now) are passed over: the ranking valued their action without the result on its way, and
    with several chains at once every free slot would otherwise take the same first run."""
    for a in advice:
        why = f"advise: {a.text()}"
        if a.action == Action.STOP:
            return None, why, False, False
        if a.variant is None or a.variant in dropped or a.variant in live:
            continue
        if a.action == Action.REEVAL:
            if auto_repeat and a.variant in reevals:
                return a.variant, why, True, True
            continue
        if a.action not in (Action.REPEAT, Action.BASELINE, Action.NEW):
            continue
        if a.variant in queued or (auto_repeat and a.action != Action.NEW and a.variant in known):
            # a repeat's evaluation is the observation it was ranked for: futility must not stop it
            return a.variant, why, a.action != Action.NEW, False
    return None


@dataclass(frozen=True)
class _Context:
    """What classifying one queued chain reads, the same for every chain of one plan."""

    base_source: Optional[str]
    baseline: Optional[str]
    base_for: dict
    base_key: Optional[float]
    noise_known: bool
    cost: _Cost


def _classify(q: QueuedItem, j: int, e: Optional[Entry], ctx: _Context) -> tuple[Tier, float, str]:
    """(tier, key within the tier, why) of the j-th queued chain of q.variant."""
    base_source, baseline, base_for, base_key, noise_known, cost = (
        ctx.base_source, ctx.baseline, ctx.base_for, ctx.base_key, ctx.noise_known, ctx.cost)
    if q.variant == baseline:
        if base_source is None and j == 0:
            return Tier.NO_BASELINE, 0.0, "no baseline yet: every delta needs it"
        if base_key is not None and j == 0:
            return Tier.SETTLES, -base_key, "a candidate needs baseline runs to settle"
        return Tier.REST, 0.0, "baseline: enough for now"
    n = e.n if e is not None else 0
    if n == 0:
        return (Tier.FIRST_RUN, 0.0, "first run of a new variant") if j == 0 else (Tier.REST, 0.0, "repeat of a variant not yet run")
    if not noise_known:
        if j == 0:
            return Tier.NO_NOISE, -(e.delta if e.delta is not None else e.mean or 0.0), \
                "no noise estimate yet: repeat the best"
        return Tier.REST, 0.0, "no noise estimate yet"
    verdict, delta, p = e.verdict, e.delta, e.p_beat
    if verdict == inference.BETTER:
        return Tier.REST, 0.0, "settled better: extra runs only tighten it"
    if verdict != inference.UNDECIDED or delta is None:
        return Tier.REST, 0.0, "nothing to settle"
    need = e.runs_needed
    if delta > 0:
        if need is not None and cost.fits(need) and j < need:
            return Tier.SETTLES, -(p or 0.0), f"undecided, P(beat) {p:.3f}: +{need} run(s) could settle it"
        if e.name in base_for and j == 0:
            return Tier.SETTLES, -(p or 0.0), "undecided: settles with baseline runs too"
        if need is not None and j >= need:
            return Tier.OUT_OF_REACH, -(p or 0.0), f"undecided, P(beat) {p:.3f}: beyond the +{need} run(s) that could settle it"
        return Tier.OUT_OF_REACH, -(p or 0.0), f"undecided, P(beat) {p:.3f}: out of reach in the time left"
    w = e.runs_needed_worse
    if w is not None and cost.fits(w) and j < w:
        return Tier.SETTLES_WORSE, (p or 0.0), f"undecided, P(beat) {p:.3f}: +{w} run(s) could settle worse"
    return Tier.REST, 0.0, "undecided, delta <= 0: out of reach in the time left"


def _pick_extra(entries, baseline, base_for, report, cost, dropped, known, noise_known):
    """The one chain --auto-repeat may add: the best candidate that a repeat can settle."""
    if not cost.fits(1):
        return None, ""
    cands = [e for e in entries.values() if e.name in known and e.name not in dropped and e.n]
    if not noise_known:
        best = max(cands, key=lambda e: e.delta if e.delta is not None else -1e9, default=None)
        return (best.name, "no noise estimate yet: repeat the best") if best else (None, "")
    up = [e for e in cands if e.verdict == inference.UNDECIDED and (e.delta or 0) > 0
          and e.runs_needed is not None and cost.fits(e.runs_needed)]
    if up:
        best = max(up, key=lambda e: e.p_beat or 0.0)
        return best.name, f"undecided, P(beat) {best.p_beat:.3f}: +{best.runs_needed} run(s) could settle it"
    if base_for and baseline in known:
        return baseline, "a candidate needs baseline runs to settle"
    down = [(e, e.runs_needed_worse) for e in cands if e.verdict == inference.UNDECIDED and (e.delta or 0) <= 0]
    down = [(e, w) for e, w in down if w is not None and cost.fits(w)]
    if down:
        e, w = min(down, key=lambda t: t[0].p_beat or 0.0)
        return e.name, f"undecided, P(beat) {e.p_beat:.3f}: +{w} run(s) could settle worse"
    return None, ""
