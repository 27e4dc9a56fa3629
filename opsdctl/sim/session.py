"""One simulated session: its chains, the store and clock the planner's gate reads, and its figures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from opsdctl.config import Reference
from opsdctl.plan.durations import Sample
from opsdctl.plan.gate import ChainInfo
from opsdctl.sim.world import BASELINE, HPARAMS, K, MARGIN_MIN, N_PROBLEMS, PROBLEM_IDS, PROFILE, REFERENCE, World
from opsdctl.stats import inference
from opsdctl.stats.compare import RunRecord
from opsdctl.stats.report import Report

ORACLE_IDEAS = 3  # ideas whose two runs fit beside the baseline's two in a session's ~8 chains


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
        self.stage_samples: list[Sample] = []
        self.live: Callable[[], list] = lambda: []  # the chains running now (a slot executor's), as Facts.running
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


class SessionFacts:
    """The PlannerGate's Facts (opsdctl.plan.facts) over a Session."""

    def __init__(self, s: Session):
        self.s = s

    def runs(self):
        return list(self.s.runs)

    def samples(self):
        return list(self.s.stage_samples)

    def baseline_label(self):
        return BASELINE

    def candidates(self, chain_ids):
        return {}  # a simulated chain's candidate is its variant

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

    def running(self):
        return self.s.live()


def run_stage(s: Session, res: SessionResult, seconds: float) -> bool:
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

