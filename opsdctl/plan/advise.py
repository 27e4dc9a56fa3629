"""The next actions, ranked by what they are expected to add to the submission's official score.

The submission takes the arm of highest forecast mean (the baseline included) once its
P(above the baseline) clears opsdctl.stats.bet.P_SUBMIT, so an action is worth its knowledge
gradient (opsdctl.stats.belief): E[max forecast mean after it] - max now, in points; a run of an
arm is worth the larger of that and its value to the thresholded rule (Belief.gain_confirm: a
confirmatory run of a leader short of the threshold may carry it over, and in the last hour that
is often the best use of a chain). A run action (repeat, baseline, new) counts the runs it opens: its gain is the best
KG(r) / r over the r <= RUNS_AHEAD runs of it that fit (one run of a close race often cannot
change the submission where three can; with r = 1 best, the gain is the one run's). Each action is priced at the planner's high-quantile durations (the figures admission
uses) and `fits` when admission would start it in the usable time left. Ranked: the actions that
fit and are worth at least MIN_GAIN, by gain per GPU-minute of the slot they will use (per
minute without GPUs: with one layout for every action that is the same order); then `stop` (gain 0: submit the best
forecast now); then the rest. `opsdctl advise`, compare's `Next:` line and the adaptive policy
read this one ranking. A re-eval is offered only for an arm with a checkpoint that may be
evaluated again (opsdctl.plan.reeval: our evaluator, checkpoint on disk), and names the chain.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from opsdctl.plan import admission
from opsdctl.stats.belief import Belief
from opsdctl.stats.screen import SCREEN

if TYPE_CHECKING:
    from opsdctl.plan.reeval import Target

# points: numerically nothing. Minutes left unused at the deadline buy nothing, so `stop` ranks
# first only when nothing that fits can change what is submitted.
MIN_GAIN = 1e-6
RUNS_AHEAD = 6  # a run action's worth looks at most this many runs of it ahead


class Action(str, enum.Enum):
    REPEAT = "repeat"
    BASELINE = "baseline"
    REEVAL = "re-eval"
    SCREEN = "screen"
    NEW = "new"
    STOP = "stop"


@dataclass(frozen=True)
class Costs:
    """High-quantile seconds: a full chain, an eval alone (re-eval), a chain with a screen eval;
    and the GPUs each stage holds (several chains at once: opsdctl.plan.slots), so an action is
    priced in GPU-minutes of the slot it will use. 0 GPUs (a CPU profile): priced in minutes."""

    chain_s: float
    eval_s: float
    screen_s: float
    train_s: float = 0.0  # of chain_s and screen_s: the train stage's share
    train_gpus: int = 0
    eval_gpus: int = 0
    slots: int = 1  # chains the worker runs at once

    def gpu_minutes(self, seconds: float, with_train: bool = True) -> float:
        """GPU-minutes of an action of `seconds` (a chain, or an eval alone without its train)."""
        if not (self.train_gpus or self.eval_gpus):
            return seconds / 60.0
        train = self.train_s if with_train else 0.0
        return (train * max(1, self.train_gpus) + (seconds - train) * max(1, self.eval_gpus)) / 60.0


@dataclass(frozen=True)
class Advice:
    action: Action
    variant: Optional[str]
    minutes: float
    fits: bool
    gain: float  # points of expected official score (per run, for an action that pays off over several)
    chain: Optional[int] = None  # re-eval: the training chain whose checkpoint it evaluates again
    gpu_minutes: Optional[float] = None  # what it costs the GPUs (None: its minutes)

    @property
    def rate(self) -> float:
        """Points per GPU-minute of the slot it uses (per minute without GPUs)."""
        cost = self.gpu_minutes if self.gpu_minutes is not None else self.minutes
        return self.gain / cost if cost > 0 else 0.0

    def to_json(self) -> dict:
        return {"action": self.action.value, "variant": self.variant, "minutes": round(self.minutes, 3),
                "gpu_minutes": round(self.gpu_minutes if self.gpu_minutes is not None else self.minutes, 3),
                "fits": self.fits, "gain": round(self.gain, 4)}

    def text(self) -> str:
        what = {Action.REPEAT: f"one more run of {self.variant}", Action.BASELINE: "one more baseline run",
                Action.REEVAL: f"re-evaluate {self.variant}'s checkpoint with fresh samples "
                               f"(`opsdctl requeue {self.chain} --reeval`)",
                Action.SCREEN: f"screen {self.variant or 'a new idea'} ({SCREEN[0]}x{SCREEN[1]})",
                Action.NEW: f"first run of {self.variant or 'a new idea'}",
                Action.STOP: "stop: submit the best forecast now"}[self.action]
        if self.action == Action.STOP:
            return what
        return (f"{what}: +{self.gain:.2f} expected official points, {admission.minutes_text(self.minutes * 60)}"
                + ("" if self.fits else ", does not fit"))


def rank(belief: Belief, costs: Costs, usable_s: Optional[float], *, new_ideas: Sequence[str] = (),
         full_samples: Optional[int] = None, reevals: Optional[Mapping[str, "Target"]] = None) -> list[Advice]:
    """Every action with its gain, minutes and fit, best first (see the module docstring).
    `new_ideas`: queued variants without a run yet (the next one names `new`/`screen`);
    `full_samples`: problems x k of a full eval (a screen's share of it); `reevals`: arm -> the
    training a re-eval of it would evaluate again and its evals so far (opsdctl.plan.reeval.Target);
    arms without one get no re-eval action."""
    def fit(seconds: float) -> bool:
        return admission.fits(seconds, usable_s).ok

    chain_min, eval_min, screen_min = costs.chain_s / 60.0, costs.eval_s / 60.0, costs.screen_s / 60.0
    chain_gpu, eval_gpu = costs.gpu_minutes(costs.chain_s), costs.gpu_minutes(costs.eval_s, with_train=False)
    screen_gpu = costs.gpu_minutes(costs.screen_s)
    runs = max(1, min(RUNS_AHEAD, int(usable_s // costs.chain_s) * max(1, costs.slots)
                      if usable_s is not None and costs.chain_s > 0 else RUNS_AHEAD))

    def per_run(gain_of) -> float:
        """A run action's worth per run: the best KG(r) / r over r runs of it that fit (r runs of one
        arm are one observation with noise s^2 / r), so a close race that one run cannot settle
        but three can is not ranked as worthless (the knowledge gradient's KG* form)."""
        return max(gain_of(belief.s2 / r) / r for r in range(1, runs + 1))

    def run_gain(i: int, n: float) -> float:
        """A run of arm i: the knowledge gradient, or what it is worth to the thresholded rule
        (a confirmatory run of a leader short of it), whichever is more."""
        return max(belief.gain_run(i, n), belief.gain_confirm(i, n))

    out = [Advice(Action.BASELINE, belief.arms[0], chain_min, fit(costs.chain_s),
                  per_run(lambda n: run_gain(0, n)), gpu_minutes=chain_gpu)]
    for i, name in enumerate(belief.arms[1:], start=1):
        out.append(Advice(Action.REPEAT, name, chain_min, fit(costs.chain_s),
                          per_run(lambda n, i=i: run_gain(i, n)), gpu_minutes=chain_gpu))
    for i, name in enumerate(belief.arms):
        target = (reevals or {}).get(name)
        noise = belief.reeval_noise(target.evals) if target is not None else None
        if noise is not None:
            out.append(Advice(Action.REEVAL, name, eval_min, fit(costs.eval_s), belief.gain_run(i, noise),
                              chain=target.train_id, gpu_minutes=eval_gpu))
    idea = new_ideas[0] if new_ideas else None
    out.append(Advice(Action.NEW, idea, chain_min, fit(costs.chain_s), per_run(belief.gain_new), gpu_minutes=chain_gpu))
    if full_samples:
        noise = belief.screen_noise(SCREEN[0] * SCREEN[1] / float(full_samples))
        if noise is not None:
            out.append(Advice(Action.SCREEN, idea, screen_min, fit(costs.screen_s), belief.gain_new(noise),
                              gpu_minutes=screen_gpu))
    worth = sorted((a for a in out if a.fits and a.gain >= MIN_GAIN), key=lambda a: -a.rate)
    # below MIN_GAIN an action is worth nothing: its rate (often last-bit noise, 1e-16) orders nothing
    rest = sorted((a for a in out if a not in worth), key=lambda a: (not a.fits, -a.rate if a.gain >= MIN_GAIN else 0.0))
    return [*worth, Advice(Action.STOP, None, 0.0, True, 0.0), *rest]


def costs_of(estimator, profile: str, hparams=None, gpus: tuple[int, int] = (0, 0), slots: int = 1) -> Costs:
    """The actions' high-quantile seconds from the learned durations (opsdctl.plan.durations), on
    `gpus` (train's, eval's GPUs: the slot they will use), `slots` chains at once."""
    train, evaluate = estimator.chain(profile, hparams, gpus=gpus)
    _, screen = estimator.chain(profile, hparams, partial=SCREEN, gpus=gpus)
    return Costs(train.high_s + evaluate.high_s, evaluate.high_s, train.high_s + screen.high_s, train.high_s,
                 gpus[0], gpus[1], slots)


def from_report(report, costs: Costs, usable_s: Optional[float], new_ideas: Sequence[str] = (),
                reevals: Optional[Mapping[str, "Target"]] = None) -> list[Advice]:
    """The ranking for a compare report (opsdctl.stats.report.Report, valued on its forecast's
    posterior); [] without a noise estimate (nothing to value by)."""
    from opsdctl.stats.belief import from_report as belief_of

    belief = belief_of(report) if report is not None else None
    if belief is None:
        return []
    full = report.full_n * report.full_k if report.full_n and report.full_k else None
    return rank(belief, costs, usable_s, new_ideas=new_ideas, full_samples=full, reevals=reevals)
