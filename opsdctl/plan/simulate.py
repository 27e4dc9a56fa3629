"""Replay a 6-hour, 4-GPU session under a fake clock: FIFO by hand vs the planner's policies.

The planner policies run the worker's own loop, `opsdctl.plan.loop.WorkerLoop`, over the worker's
own gate, `opsdctl.plan.planner.PlannerGate` (policy.plan, auto-repeat, admission,
durations.Estimator, futility.judge_look, compare.build_report): the session is the loop's queue
and the gate's Facts, a fake executor runs each claimed chain (asking the gate what the local
executor asks it: grant, released, on_progress at every look) and the clock is the session's.
`simulate_session` is the entry point another benchmark can call with its own world and policy.
Only the world is simulated:

- stage durations: train ~ U(16, 19) min, eval ~ U(22, 27) min (the users' figures, DEVELOPERS.md), and STAGE_GAP_S
  of idle GPU between stages (release wait + the next start), for every policy alike;
- the benchmark: 30 problems with fixed per-problem solve rates p_i (Beta quantiles, mean
  54.22%); a run of a variant with true effect e has a true mean u ~ N(54.22 + e, tau^2) and
  per-problem rates shifted on the logit scale to average u; each problem gets 12 Bernoulli
  samples, so avg@12, per-problem counts, V_eval and the looks at k = 4, 8 all exist;
  tau^2 = 1.48^2 - E[V_eval], so a run's total sd is the measured 1.48 points;
- the published reference (54.22, sd 1.48, n = 5) is in the config, as users have it, and the
  local setup sits exactly on it (offset 0; `offset` moves every run);
- a re-eval (auto-repeat's, when `opsdctl advise` ranks it first) draws fresh samples of a
  trained chain's checkpoint (the same true mean u), so compare pools the two evals as one run;
- FIFO by hand: the user queues the baseline first (as the quick start does: local baseline runs
  are what removes the published mean's setup offset from compare's verdicts), then each idea
  once (round robin) or twice in a row, in a random order, and keeps the GPUs busy until the
  budget ends; a chain running at the deadline is cut (lost). The planner policies get the same
  queue (the baseline and each idea twice, or once). `oracle x2` is no policy but a ceiling: the
  x2 queue cut to the ideas of largest true |effect|, run by hand.

Figures per policy (mean over sessions, with standard errors): GPU-busy fraction of the budget
and until the GPUs went idle for good (the last admissible chain), chains cut by the deadline,
settled comparisons (final verdict better/worse), correct ones, and wrong ones in absolute terms
(per session, and per no-effect idea tried) as well as the wrong-verdict rate (of those settled),
and the bet: the true effect of the arm of highest forecast official mean at the end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from opsdctl.config import Reference
from opsdctl.plan.durations import Sample, cost_key
from opsdctl.plan.gate import ChainInfo, Grant, Stop
from opsdctl.plan.loop import LoopOptions, WorkerLoop
from opsdctl.plan.planner import PlannerGate, PlannerSettings
from opsdctl.plan.submission import pick_leader
from opsdctl.store.states import State
from opsdctl.stats import inference
from opsdctl.stats.compare import RunRecord, build_report
from opsdctl.stats.report import Report

BASELINE = "baseline"
BASE_MEAN = 54.22
SIGMA = 1.48
REFERENCE = Reference(mean=BASE_MEAN, sd=SIGMA, n=5)
N_PROBLEMS = 30
K = 12
LOOKS = (4, 8)
TRAIN_MIN = (16.0, 19.0)
EVAL_MIN = (22.0, 27.0)
EVAL_LOAD_MIN = 1.5  # of an eval's duration, before sampling starts (model load, merge)
STAGE_GAP_S = 10.0
MARGIN_MIN = 5.0
PROFILE = "qwen3-1.7b"
HPARAMS = {"max_completion_length": 1024}
DEFAULT_EFFECTS = (0.0, 0.0, 1.0, 2.0, 3.0, -2.0)
ORACLE_IDEAS = 3  # ideas whose two runs fit beside the baseline's two in a session's ~8 chains
BETA_AB = (0.13, 0.11)  # per-problem solve rates: mostly near 0 or 1, as on AIME
PROBLEM_IDS = tuple(f"P{i}" for i in range(N_PROBLEMS))

POLICIES = {
    # name: (kind, the user's queue: each variant 1, 2 or "1or2" (at random) times in a row, planner settings)
    "fifo-by-hand x1": ("hand", 1, None),
    "fifo-by-hand 1-2": ("hand", "1or2", None),
    "fifo-by-hand x2": ("hand", 2, None),
    # not a policy: the x2 queue cut to the ORACLE_IDEAS ideas of largest |true effect|, i.e. the most
    # verdicts chains of the user's x2 queue can buy when nothing has to be spent finding them
    "oracle x2": ("oracle", 2, None),
    "planner fifo": ("planner", 2, dict(policy="fifo")),
    "adaptive": ("planner", 2, dict(policy="adaptive", auto_repeat=True)),
    "adaptive, x1 queue": ("planner", 1, dict(policy="adaptive", auto_repeat=True)),
    "adaptive, auto-repeat first": ("planner", 2, dict(policy="adaptive", auto_repeat=True, auto_repeat_first=True)),
    "adaptive + futility": ("planner", 2, dict(policy="adaptive", auto_repeat=True, futility=True)),
    "adaptive, every variant first": ("planner", 2, dict(policy="adaptive", auto_repeat=True, try_every_variant=True)),
    "verdicts": ("planner", 2, dict(policy="adaptive", auto_repeat=True, objective="verdicts")),
    "verdicts, auto-repeat first": ("planner", 2, dict(policy="adaptive", auto_repeat=True, objective="verdicts",
                                                       auto_repeat_first=True)),
}


# --- the benchmark world ------------------------------------------------------------------


def _logit(p):
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def _shift_to_mean(logits: np.ndarray, target: float) -> np.ndarray:
    """Per-problem rates sigmoid(logit_i + c) whose mean is `target` (bisection on c)."""
    target = min(max(target, 0.005), 0.995)
    lo, hi = -15.0, 15.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < target:
            lo = mid
        else:
            hi = mid
    return 1.0 / (1.0 + np.exp(-(logits + 0.5 * (lo + hi))))


@dataclass
class World:
    logits: np.ndarray  # base per-problem logits (mean rate BASE_MEAN/100)
    tau2: float  # training variance, points^2
    v_eval: float  # eval-sampling variance of one run, points^2
    train_min: tuple = TRAIN_MIN  # a train stage's duration ~ U(lo, hi) minutes
    eval_min: tuple = EVAL_MIN

    @classmethod
    def make(cls, sigma: float = SIGMA, train_min: tuple = TRAIN_MIN, eval_min: tuple = EVAL_MIN) -> "World":
        """`sigma`: a run's total sd, points (training + eval sampling)."""
        from scipy.stats import beta

        q = (np.arange(N_PROBLEMS) + 0.5) / N_PROBLEMS
        p = _shift_to_mean(_logit(beta.ppf(q, *BETA_AB)), BASE_MEAN / 100.0)
        v = float(1e4 / N_PROBLEMS**2 * np.sum(p * (1 - p)) / K)
        return cls(_logit(p), max(0.0, sigma**2 - v), v, tuple(train_min), tuple(eval_min))

    def run(self, rng: np.random.Generator, effect: float) -> np.ndarray:
        """One run's samples: problems x K booleans (cumulative counts give the looks)."""
        return self.evaluate(rng, self.train(rng, effect))

    def train(self, rng: np.random.Generator, effect: float) -> float:
        """A training: its checkpoint's true mean score u, points."""
        return BASE_MEAN + effect + rng.normal(0.0, math.sqrt(self.tau2))

    def evaluate(self, rng: np.random.Generator, u: float) -> np.ndarray:
        """One evaluation (a fresh draw of samples) of a checkpoint of true mean u."""
        p = _shift_to_mean(self.logits, u / 100.0)
        return rng.random((N_PROBLEMS, K)) < p[:, None]


# --- one session --------------------------------------------------------------------------


@dataclass
class SimChain:
    chain_id: int
    variant: str
    seed: int
    repeat: int
    state: str = "queued"
    reason: str = ""
    auto: bool = False
    eval_only: bool = False  # a re-eval of chain `train_of`'s checkpoint (draw `draw`)
    train_of: Optional[int] = None
    draw: int = 0
    u: Optional[float] = None  # a trained chain's checkpoint: its true mean score


@dataclass
class SessionResult:
    policy: str
    budget_s: float
    busy_s: float = 0.0
    useful_s: float = 0.0  # in chains that produced a full score
    last_end_s: float = 0.0
    started: int = 0
    succeeded: int = 0
    cut: int = 0
    skipped_admission: int = 0
    skipped_policy: int = 0
    eval_skipped: int = 0
    futility_stops: int = 0
    futility_dropped_winners: int = 0
    auto_repeats: int = 0
    reevals: int = 0  # re-evals started (auto-repeat's; fresh eval samples of a scored checkpoint)
    settled: int = 0
    correct: int = 0
    wrong: int = 0
    winners_found: int = 0  # candidates with effect >= 2 settled better
    null_tried: int = 0  # candidates with no true effect (0) that got a full run
    null_wrong: int = 0  # ... whose final verdict is settled (any settled verdict is wrong for them)
    false_better: int = 0  # `better` for a candidate whose true effect is <= 0
    tried: int = 0  # candidates with at least one full run (questions asked)
    answered: int = 0  # settled verdicts, plus variants dropped as futile (answer: not a winner)
    answered_correct: int = 0
    chain_overruns: int = 0  # chains that took longer than the high estimate they were admitted with
    estimate_overruns: int = 0  # stages that took longer than the estimate admission used
    baseline_chains: int = 0  # chains started of the baseline (user-queued and auto-repeat)
    idle_while_fits_s: float = 0.0  # GPUs idle at the end while advise ranked a repeat above stop
    idle_note: Optional[str] = None  # the worker's idle reason at the end (a cap), if any
    run_order: list = field(default_factory=list)  # chain ids, in the order they started
    verdicts: dict = field(default_factory=dict)
    chains: list = field(default_factory=list)  # the session's SimChains at the end (state, auto, scores)
    report: Optional[Report] = None  # compare's final report
    submitted: Optional[str] = None  # what the submission rule (plan.submission.pick_leader) submits at the end
    submission_gain: float = 0.0  # its true effect over the baseline (0 for the baseline), points
    regret: float = 0.0  # the best true effect among the ideas queued (baseline included) minus that


class Session:
    """A simulated store + clock; the Facts of a PlannerGate."""

    def __init__(self, world: World, effects: Sequence[float], seed: int, hours: float, repeats,
                 offset: float = 0.0, oracle: bool = False, reference: Reference = REFERENCE):
        self.world = world
        self.reference = reference  # the published baseline in the config
        self.rng = np.random.default_rng(seed)
        order = self.rng.permutation(len(effects))
        # the user queues the baseline first, as the quick start does (`opsdctl queue baseline ...`):
        # local baseline runs are what removes the published mean's setup offset
        self.effects = {BASELINE: 0.0, **{f"c{i + 1}": float(effects[j]) for i, j in enumerate(order)}}
        self.offset = offset  # the local setup's offset from the published mean (every run)
        self.budget_s = hours * 3600.0
        self.t = 0.0
        self.chains: list[SimChain] = []
        self.runs: list[RunRecord] = []
        self._samples: list[Sample] = []
        self.repeats = repeats
        self.queue_rng = np.random.default_rng([seed, 1])
        ideas = sorted((n for n in self.effects if n != BASELINE), key=lambda n: -abs(self.effects[n]))
        self.queued_variants = ([BASELINE, *[n for n in self.effects if n in ideas[:ORACLE_IDEAS]]] if oracle
                                else list(self.effects))
        self.queue_round()

    # a user's queue: every variant `repeats` times in a row ("1or2": once or twice at random), in
    # the drawn order; the draws come from their own generator, so every policy sees the same queue
    def queue_round(self) -> None:
        for name in self.queued_variants:
            n = self.repeats if self.repeats != "1or2" else int(self.queue_rng.integers(1, 3))
            for _ in range(n):
                self.add_chain(name)

    def add_chain(self, variant: str, auto: bool = False) -> SimChain:
        n = sum(1 for c in self.chains if c.variant == variant)
        c = SimChain(len(self.chains) + 1, variant, n, n, auto=auto)
        self.chains.append(c)
        return c

    def queued(self) -> list[SimChain]:
        return [c for c in self.chains if c.state == "queued"]

    def info(self, c: SimChain) -> ChainInfo:
        vid = 0 if c.variant == BASELINE else int(c.variant[1:])
        return ChainInfo(chain_id=c.chain_id, variant=c.variant, variant_id=vid, variant_name=c.variant,
                         version=1, hash=c.variant, seed=c.seed, repeat=c.repeat, priority=0, profile=PROFILE,
                         hparams=dict(HPARAMS), method={}, auto=c.auto, eval_only=c.eval_only)

    def usable(self) -> float:
        return self.budget_s - self.t - MARGIN_MIN * 60.0

    # --- what the gate's Facts read ------------------------------------------------------------

    def dropped(self):
        return {c.variant: f"an evaluation of it was stopped as futile (chain {c.chain_id}: {c.reason})"
                for c in self.chains if c.state == "stopped-futile"}

    def queue_repeat(self, variant, why):
        if variant not in self.effects:
            return None
        return self.info(self.add_chain(variant, auto=True))

    def reeval_targets(self, runs) -> dict:
        """Every scored training may be evaluated again (the simulated evaluator is ours)."""
        from opsdctl.plan import reeval

        trained = {c.chain_id for c in self.chains if not c.eval_only and c.u is not None}
        return reeval.pick(runs, trained.__contains__)

    def queue_reeval(self, train_id: int, why: str):
        t = self.chains[train_id - 1]
        draw = 1 + max(c.draw for c in self.chains if c.chain_id == train_id or c.train_of == train_id)
        c = SimChain(len(self.chains) + 1, t.variant, t.seed, t.repeat, auto=True, eval_only=True,
                     train_of=train_id, draw=draw)
        self.chains.append(c)
        return self.info(c)

    # --- the world's answers ------------------------------------------------------------------

    def draw(self, lo_hi) -> float:
        return float(self.rng.uniform(*lo_hi)) * 60.0

    def record(self, c: SimChain, samples: np.ndarray) -> None:
        counts = tuple(int(x) for x in samples.sum(axis=1))
        self.runs.append(RunRecord(c.variant, c.chain_id, inference.run_score(counts, K), K, N_PROBLEMS, counts,
                                   PROBLEM_IDS, False, train_id=c.train_of or c.chain_id, draw=c.draw))


class _Facts:
    """Adapter: the PlannerGate's Facts over a Session."""

    def __init__(self, s: Session):
        self.s = s

    def runs(self):
        return list(self.s.runs)

    def samples(self):
        return list(self.s._samples)

    def baseline_label(self):
        return BASELINE

    def dropped(self):
        return self.s.dropped()

    def queue_repeat(self, variant, why):
        return self.s.queue_repeat(variant, why)

    def reeval_targets(self, runs):
        return self.s.reeval_targets(runs)

    def latest_training(self):
        return next((self.s.info(c) for c in reversed(self.s.chains) if not c.eval_only), None)

    def queue_reeval(self, train_id, why):
        return self.s.queue_reeval(train_id, why)

    def save_plan(self, doc):
        return None


def _run_stage(s: Session, res: SessionResult, seconds: float) -> bool:
    """Advance the clock by a stage; False (and the clock at the deadline) when the deadline cuts it."""
    if s.t + seconds > s.budget_s:
        res.busy_s += max(0.0, s.budget_s - s.t)
        s.t = s.budget_s
        res.last_end_s = s.budget_s
        return False
    s.t += seconds
    res.busy_s += seconds
    res.last_end_s = s.t
    return True


def run_hand(s: Session, res: SessionResult) -> None:
    """FIFO by hand: the queue as written, back to back, until the budget ends; no admission."""
    while s.t < s.budget_s:
        if not s.queued():
            s.queue_round()  # the user keeps the GPUs busy: another round
        c = s.queued()[0]
        c.state = "running"
        res.started += 1
        res.baseline_chains += int(c.variant == BASELINE)
        res.run_order.append(c.chain_id)
        tr = s.draw(s.world.train_min)
        if not _run_stage(s, res, tr):
            c.state, res.cut = "cut", res.cut + 1
            break
        s.t = min(s.budget_s, s.t + STAGE_GAP_S)
        ev = s.draw(s.world.eval_min)
        if not _run_stage(s, res, ev):
            c.state, res.cut = "cut", res.cut + 1
            break
        s.record(c, s.world.run(s.rng, s.effects[c.variant] + s.offset))
        c.state = "succeeded"
        res.succeeded += 1
        res.useful_s += tr + ev
        s.t = min(s.budget_s, s.t + STAGE_GAP_S)


class _Clock:
    """The fake clock: the session's simulated seconds; sleeping advances it."""

    def __init__(self, s: Session):
        self.s = s

    def now(self) -> float:
        return self.s.t

    def sleep(self, seconds: float) -> None:
        self.s.t = min(self.s.budget_s, self.s.t + max(0.0, seconds))


class _Queue:
    """The loop's queue over the session's chains (in queue order, as the store lists them)."""

    def __init__(self, s: Session, res: SessionResult, gate: PlannerGate):
        self.s, self.res, self.gate = s, res, gate

    def queued(self) -> list[ChainInfo]:
        return [self.s.info(c) for c in self.s.queued()]

    def skip(self, chain_id: int, reason: str) -> bool:
        c = self.s.chains[chain_id - 1]
        if c.state != "queued":
            return False
        c.state, c.reason = "skipped", reason
        is_policy = self.gate.plan is not None and chain_id in self.gate.plan.skips
        self.res.skipped_policy += int(is_policy)
        self.res.skipped_admission += int(not is_policy)
        return True

    def claim(self, chain_id: int) -> bool:
        c = self.s.chains[chain_id - 1]
        if c.state != "queued":
            return False
        c.state = "running"
        return True


class _Executor:
    """The fake executor: runs a claimed chain to its end inside start(), as the local one does,
    asking the gate what the local executor asks it (grant before each stage, released after,
    on_progress at every look), with drawn durations and scores instead of processes."""

    def __init__(self, s: Session, res: SessionResult, gate: PlannerGate):
        self.s, self.res, self.gate = s, res, gate
        self._ended: list[tuple[int, State]] = []

    def has_room(self) -> bool:
        return True

    def busy(self) -> int:
        return 0

    def poll(self) -> list[tuple[int, State]]:
        out, self._ended = self._ended, []
        return out

    def start(self, chain_id: int) -> None:
        self._ended.append((chain_id, self._run(self.s.chains[chain_id - 1])))

    def _run(self, c: SimChain) -> State:
        s, res, gate = self.s, self.res, self.gate
        info = s.info(c)
        res.started += 1
        res.auto_repeats += int(c.auto)
        res.reevals += int(c.eval_only)
        res.baseline_chains += int(c.variant == BASELINE)
        res.run_order.append(c.chain_id)
        admitted_high = sum(e.high_s for e in gate.chain_estimate(info))
        tr = 0.0
        if not c.eval_only:
            g = gate.grant(info, "train")
            if not isinstance(g, Grant):
                c.state, c.reason = "skipped", g.reason
                res.skipped_admission += 1
                return State.SKIPPED
            tr = s.draw(s.world.train_min)
            res.estimate_overruns += int(g.estimate_seconds is not None and tr > g.estimate_seconds)
            if not _run_stage(s, res, tr):
                c.state, res.cut = "cut", res.cut + 1
                return State.INTERRUPTED
            s._samples.append(Sample("train", cost_key("train", PROFILE, HPARAMS), tr, g.estimate_seconds, c.chain_id))
            gate.released(info, "train", [])
            s.t += STAGE_GAP_S
        g = gate.grant(info, "eval")
        if not isinstance(g, Grant):
            c.state, c.reason = "skipped", g.reason
            res.eval_skipped += 1
            return State.SKIPPED
        ev = s.draw(s.world.eval_min)
        res.estimate_overruns += int(g.estimate_seconds is not None and ev > g.estimate_seconds)
        if c.eval_only:  # fresh samples of the checkpoint chain `train_of` trained
            samples = s.world.evaluate(s.rng, s.chains[c.train_of - 1].u)
        else:
            c.u = s.world.train(s.rng, s.effects[c.variant] + s.offset)
            samples = s.world.evaluate(s.rng, c.u)
        stop: Optional[Stop] = None
        at = ev
        for k in LOOKS:
            rec = {"done": N_PROBLEMS * k, "total": N_PROBLEMS * K, "look_k": k,
                   "problems": [{"id": f"P{i}", "correct": int(x), "samples": k}
                                for i, x in enumerate(samples[:, :k].sum(axis=1))]}
            stop = gate.on_progress(info, "eval", rec)
            if stop is not None:
                at = EVAL_LOAD_MIN * 60.0 + (ev - EVAL_LOAD_MIN * 60.0) * k / K
                break
        if not _run_stage(s, res, at):
            c.state, res.cut = "cut", res.cut + 1
            return State.INTERRUPTED
        res.chain_overruns += int(tr + (STAGE_GAP_S if tr else 0.0) + at > admitted_high)
        gate.released(info, "eval", [])
        s.t += STAGE_GAP_S
        if stop is not None:
            c.state, c.reason = "stopped-futile", stop.reason
            res.futility_stops += 1
            res.futility_dropped_winners += int(s.effects[c.variant] > 0)
            return State.STOPPED_FUTILE
        s._samples.append(Sample("eval", cost_key("eval", PROFILE, HPARAMS), ev, g.estimate_seconds, c.chain_id))
        s.record(c, samples)
        c.state = "succeeded"
        res.succeeded += 1
        res.useful_s += tr + ev
        return State.SUCCEEDED


def run_planner(s: Session, res: SessionResult, settings: PlannerSettings) -> None:
    """The worker's own loop (opsdctl.plan.loop.WorkerLoop) over the planner's gate, with the
    session as its queue, a fake executor and a fake clock. The user keeps the GPUs busy: when
    the worker drains the queue, they queue another round of it and start it again, until a
    round starts nothing."""
    gate = PlannerGate(settings, _Facts(s), budget_left=s.usable, clock=lambda: s.t, sleep=lambda x: None)
    loop = WorkerLoop(gate, _Queue(s, res, gate), _Executor(s, res, gate), _Clock(s),
                      options=LoopOptions(drain=True, poll_s=settings.poll_s))
    while True:
        before = len(loop.started)
        loop.run()
        if len(loop.started) == before or s.t >= s.budget_s:
            break
        s.queue_round()
    res.idle_while_fits_s = _idle_while_action_fits(s, gate)
    res.idle_note = gate.idle_reason()


def _idle_while_action_fits(s: Session, gate: PlannerGate) -> float:
    """Seconds the GPUs sat idle at the end while `opsdctl advise` (compare's `Next:`) ranked an
    action the worker can take above `stop` and at least one chain still fit."""
    from opsdctl.plan import advise

    usable = s.usable()
    rep = build_report(s.runs, baseline=BASELINE, reference=s.reference)
    ranked = advise.from_report(rep, advise.costs_of(gate.estimator, PROFILE, HPARAMS), usable,
                                reevals=s.reeval_targets(s.runs))
    top = ranked[0] if ranked else None
    takes = (advise.Action.REPEAT, advise.Action.BASELINE, advise.Action.REEVAL)
    return usable if top is not None and top.action in takes and top.fits else 0.0


def judge(s: Session, res: SessionResult) -> None:
    """Final verdicts of the compare report against the true effects, and the bet (what the
    submission rule submits, scored by its true effect). A variant dropped as futile (no full run
    left to judge) counts as answered "not a winner": right when its effect <= 0."""
    rep = build_report(s.runs, baseline=BASELINE, reference=s.reference)
    res.report = rep
    for e in rep.full:
        v, eff = e.verdict, s.effects[e.name]
        res.verdicts[e.name] = (v, eff)
        if v in (inference.BETTER, inference.WORSE):
            res.settled += 1
            ok = (v == inference.BETTER and eff > 0) or (v == inference.WORSE and eff < 0)
            res.correct += int(ok)
            res.wrong += int(not ok)
            res.winners_found += int(v == inference.BETTER and eff >= 2.0)
            res.false_better += int(v == inference.BETTER and eff <= 0)
        res.null_tried += int(eff == 0.0)
        res.null_wrong += int(eff == 0.0 and v in (inference.BETTER, inference.WORSE))
    res.tried = len(rep.full)
    # the bet: what `export-recipe --leader` submits from this report, scored by its true effect
    lead = pick_leader(rep)
    res.submitted = lead.variant or BASELINE
    res.submission_gain = 0.0 if lead.variant is None else s.effects[lead.variant]
    res.regret = max(s.effects.values()) - res.submission_gain  # a policy that never tries the best idea pays for it
    res.answered, res.answered_correct = res.settled, res.correct
    for name in s.dropped():
        if name != BASELINE and res.verdicts.get(name, (None,))[0] not in (inference.BETTER, inference.WORSE):
            res.answered += 1
            res.answered_correct += int(s.effects[name] <= 0)


def simulate_session(policy_name: str, seed: int, hours: float = 6.0, effects: Sequence[float] = DEFAULT_EFFECTS,
                     world: Optional[World] = None, offset: float = 0.0,
                     settings: Optional[PlannerSettings] = None, reference: Reference = REFERENCE) -> SessionResult:
    """One session: `policy_name` from POLICIES (its user queue and planner settings); `settings`
    replaces the planner settings (another benchmark's own policy). `effects`: true effects of
    the candidates, points; `offset`: the local setup's offset from the published mean (every
    run); `world`: the benchmark's noise and the stage durations (World.make); `reference`: the
    published baseline the config gives (its sd need not be the world's). The result holds
    the figures, the chains in run order (`run_order`, `chains`) and compare's final `report`."""
    kind, repeats, overrides = POLICIES[policy_name]
    world = world or World.make()
    s = Session(world, effects, seed, hours, repeats, offset, oracle=kind == "oracle", reference=reference)
    res = SessionResult(policy_name, s.budget_s)
    if kind in ("hand", "oracle"):
        run_hand(s, res)
    else:
        settings = settings or PlannerSettings(baseline=BASELINE, reference=reference, poll_s=1.0,
                                               defaults_s=(("train", 19 * 60.0), ("eval", 27 * 60.0)), **overrides)
        run_planner(s, res, settings)
    judge(s, res)
    res.chains = list(s.chains)
    return res


# --- many sessions ------------------------------------------------------------------------


def _mean_se(xs: Sequence[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=float)
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else 0.0


def summarize(results: Sequence[SessionResult]) -> dict:
    def ms(f):
        m, se = _mean_se([f(r) for r in results])
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
                  effects: Sequence[float] = DEFAULT_EFFECTS, policies: Optional[Sequence[str]] = None) -> dict:
    """Every policy over the same seeded sessions (same variant order, same world)."""
    t0 = time.time()
    world = World.make()
    names = list(policies or POLICIES)
    out = {}
    for name in names:
        out[name] = summarize([simulate_session(name, seed + i, hours, effects, world) for i in range(sessions)])
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
        "Every planner policy runs the worker's own loop (opsdctl.plan.loop.WorkerLoop) and gate.",
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
    import json

    docs = [docs] if isinstance(docs, dict) else list(docs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    j, m = out / "simulate.json", out / "simulate.md"
    plain = [{k: v for k, v in d.items() if k != "markdown"} for d in docs]
    j.write_text(json.dumps(plain[0] if len(plain) == 1 else {"scenarios": plain}, indent=2) + "\n")
    m.write_text("\n\n".join(d["markdown"] for d in docs) + "\n\n" + goals_markdown(docs)
                 + ("\n\n" + notes if notes else "") + "\n")
    return j, m
