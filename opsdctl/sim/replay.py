"""One session replayed under a policy: FIFO by hand, or the planner's policies through the worker's loop.

FIFO by hand: the user queues the baseline first (as the quick start does: local baseline runs
are what removes the published mean's setup offset from compare's verdicts), then each idea
once (round robin) or twice in a row, in a random order, and keeps the GPUs busy until the
budget ends; a chain running at the deadline is cut (lost). The planner policies run the
worker's own loop (opsdctl.plan.loop.WorkerLoop) over the worker's own gate
(opsdctl.plan.planner.PlannerGate: policy.plan, auto-repeat, admission, durations.Estimator,
futility.judge_look, compare.build_report) and get the same queue (the baseline and each idea
twice, or once); a re-eval (auto-repeat's, when `opsdctl advise` ranks it first) is fresh
samples of a trained chain's checkpoint. `oracle x2` is no policy but a ceiling: the x2 queue
cut to the ideas of largest true |effect|, run by hand. `judge` scores the final compare report
against the true effects, and the bet: the true effect of what the submission rule submits.
`simulate_session` is the entry point another benchmark can call with its own world and policy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from opsdctl.config import Reference
from opsdctl.plan.loop import LoopOptions, WorkerLoop
from opsdctl.plan.planner import PlannerGate, PlannerSettings
from opsdctl.plan.submission import pick_leader
from opsdctl.sim.seams import SimClock, SimExecutor, SimQueue
from opsdctl.sim.slots import SlotClock, SlotExecutor, slot_layout
from opsdctl.sim.session import Session, SessionFacts, SessionResult, run_stage
from opsdctl.sim.world import BASELINE, DEFAULT_EFFECTS, HPARAMS, PROFILE, REFERENCE, STAGE_GAP_S, World
from opsdctl.stats import inference
from opsdctl.stats.compare import build_report

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
        if not run_stage(s, res, tr):
            c.state, res.cut = "cut", res.cut + 1
            break
        s.t = min(s.budget_s, s.t + STAGE_GAP_S)
        ev = s.draw(s.world.eval_min)
        if not run_stage(s, res, ev):
            c.state, res.cut = "cut", res.cut + 1
            break
        s.record(c, s.world.run(s.rng, s.effects[c.variant] + s.offset))
        c.state = "succeeded"
        res.succeeded += 1
        res.useful_s += tr + ev
        s.t = min(s.budget_s, s.t + STAGE_GAP_S)



def run_planner(s: Session, res: SessionResult, settings: PlannerSettings) -> None:
    """The worker's own loop (opsdctl.plan.loop.WorkerLoop) over the planner's gate, with the
    session as its queue, a fake executor and a fake clock. The user keeps the GPUs busy: when
    the worker drains the queue, they queue another round of it and start it again, until a
    round starts nothing. With GPU slots in the settings' layout (`--gpus-per-chain`), the
    executor runs several chains at once on their own GPUs (opsdctl.sim.slots)."""
    gate = PlannerGate(settings, SessionFacts(s), budget_left=s.usable, clock=lambda: s.t, sleep=lambda x: None)
    if settings.layout.devices:
        executor = SlotExecutor(s, res, gate, settings.layout)
        clock = SlotClock(s, executor)
    else:
        executor, clock = SimExecutor(s, res, gate), SimClock(s)
    loop = WorkerLoop(gate, SimQueue(s, res, gate), executor, clock,
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
    costs = advise.costs_of(gate.estimator, PROFILE, HPARAMS, gate.widths(), gate.settings.layout.max_chains)
    ranked = advise.from_report(rep, costs, usable,
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
                     settings: Optional[PlannerSettings] = None, reference: Reference = REFERENCE, *,
                     gpus_per_chain: Optional[int] = None) -> SessionResult:
    """One session: `policy_name` from POLICIES (its user queue and planner settings); `settings`
    replaces the planner settings (another benchmark's own policy). `effects`: true effects of
    the candidates, points; `offset`: the local setup's offset from the published mean (every
    run); `world`: the benchmark's noise and the stage durations (World.make); `reference`: the
    published baseline the config gives (its sd need not be the world's); `gpus_per_chain`: the
    planner policies run on the session's 4 GPUs in slots of that many (None: one chain at a
    time on all four, the executor of opsdctl.sim.seams). The result holds
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
        if gpus_per_chain is not None:  # our trainer and evaluator follow {num_gpus}: they may run wider
            settings = replace(settings, layout=slot_layout(gpus_per_chain), widen=("train", "eval"))
        run_planner(s, res, settings)
    judge(s, res)
    res.chains = list(s.chains)
    return res

