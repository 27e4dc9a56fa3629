"""The planner: the worker's Gate (opsdctl.plan.gate) built from the pure decision functions.

PlannerGate answers the worker's five questions with:
  order     -> policy.plan over the queue and the compare report (fifo | adaptive), and with
               --auto-repeat, once the user's queued chains have run (or before them with
               auto_repeat_first), one extra chain it queues itself; status calls the same
               method with dry_run (nothing queued) to show the order the worker follows;
  admit     -> the policy's skips, then admission.admit_chain on the duration estimates;
  grant     -> admission re-checks (the whole chain before train, the eval before eval) and the
               stage's estimate; which GPUs, and whether NVML says they are free, is the worker's
               (opsdctl.daemon.gpu_pool, opsdctl.daemon.gpu_gate), never the planner's;
  on_progress -> futility.judge_look on the eval's look records (opt-in) -> Stop(stopped-futile);
  released  -> nothing (the worker waits for a stage's GPU memory itself).
It reads the world through `Facts` (opsdctl.plan.facts: the store for the worker, a simulated
session for `opsdctl simulate`) and time through an injectable clock, so the simulator drives this very
class, not a copy of its rules.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

from opsdctl.plan import admission, advise, policy, timeline
from opsdctl.plan.durations import Estimator
from opsdctl.plan.facts import Facts, NoFacts
from opsdctl.plan.futility import FutilityContext, judge_look
from opsdctl.plan.policy import SUBMISSION
from opsdctl.plan.gate import ChainInfo, Grant, Skip, Start, Stop
from opsdctl.plan.slots import Layout
from opsdctl.plan.store_facts import StoreFacts
from opsdctl.templates import takes_gpu_count
from opsdctl.stats.report import Report
from opsdctl.store.states import State



@dataclass(frozen=True)
class PlannerSettings:
    policy: str = policy.FIFO
    futility: bool = False
    auto_repeat: bool = False
    auto_repeat_max: Optional[int] = None  # a cap only when the user sets one
    auto_repeat_first: bool = False  # opt-in: auto-repeat chains may run before the user's queued ones
    try_every_variant: bool = False  # adaptive: the tiers alone (first runs of every variant first), no `advise` ranking
    objective: str = SUBMISSION  # adaptive: what the budget is spent on (policy.OBJECTIVES)
    baseline: Optional[str] = None  # [baseline] variant (a name, or name@vN)
    reference: object = None  # config.Reference
    defaults_s: tuple = (("train", 19 * 60.0), ("eval", 27 * 60.0))
    layout: Layout = Layout()  # the worker's GPUs and slots (no GPUs: one chain at a time)
    widen: tuple[str, ...] = ()  # stages whose command takes {num_gpus} or {gpus}: they may run wider
    poll_s: float = 2.0

    @property
    def defaults(self) -> dict:
        return dict(self.defaults_s)


@dataclass(frozen=True)
class AutoNext:
    """What --auto-repeat queues at this order: one more chain of `variant`, or (`reeval`) a
    re-eval of the checkpoint chain `train_id` trained."""

    variant: str
    why: str
    reeval: bool = False
    train_id: Optional[int] = None


class PlannerGate:
    def __init__(
        self,
        settings: PlannerSettings,
        facts: Facts,
        budget_left: Optional[Callable[[], Optional[float]]] = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        report: Callable[[str], None] = lambda msg: None,
    ):
        self.settings = settings
        self.facts = facts
        self.budget_left = budget_left or (lambda: None)
        self.clock = clock
        self.sleep = sleep
        self.report = report
        self.plan: Optional[policy.Plan] = None
        self.estimator = Estimator([], settings.defaults)
        self.compare: Optional[Report] = None  # the compare report of the last refresh (None: fifo)
        self.extra_queued = 0
        self._futility: dict[int, Optional[FutilityContext]] = {}
        self._started_on: dict[int, int] = {}  # chain id -> the wider slot's GPUs it was started on
        self.looks: list[tuple[int, object]] = []  # (chain id, futility.Look), for reports
        self._last_saved: Optional[str] = None
        self.auto_next: Optional[AutoNext] = None  # what auto-repeat queues at this order
        self.runs: list = []  # the scored runs of the last refresh (compare's records)
        self.reevals: dict = {}  # label -> reeval.Target: the training a re-eval of it evaluates again
        self._basis: Optional[ChainInfo] = None  # the chain whose durations price advise's actions
        self.idle_note: Optional[str] = None  # why nothing more is planned with budget left
        self._noted: Optional[str] = None

    # --- facts -> a compare report and estimates ------------------------------------------

    def refresh(self, report: bool = True) -> None:
        """Estimates from history and (`report`) the compare report over the scored runs; the
        fifo order needs no report, so the worker and status skip the statistics then."""
        if report:
            from opsdctl.stats.compare import build_report

            self.runs = self.facts.runs()
            self.compare = build_report(self.runs, baseline=self.facts.baseline_label(),
                                        reference=self.settings.reference)
        else:
            self.compare, self.runs = None, []
        self.estimator = Estimator(self.facts.samples(), self.settings.defaults)

    def widths(self, at_least: int = 0) -> tuple[int, int]:
        """The GPUs (train's, eval's) a chain's stages run on: the layout's, or `at_least` for the
        stages that may run wider."""
        lay, s = self.settings.layout, self.settings
        return tuple(max(lay.gpus_of(st), at_least if st in s.widen else 0) if lay.devices else 0
                     for st in ("train", "eval"))

    def chain_estimate(self, chain: ChainInfo, at_least: int = 0):
        """(train, eval) estimates of `chain` on the GPUs its stages will run on."""
        return self.estimator.of_chain(chain, gpus=self.widths(at_least))

    def running_now(self) -> list[timeline.Running]:
        """The chains running now (Facts.running), with their estimates, for the slots' timeline."""
        out = []
        for live in self.facts.running():
            tr, ev = self.chain_estimate(live.info)
            out.append(timeline.Running(live.info.chain_id, live.info.variant, live.stage, live.elapsed_s, tr, ev,
                                        live.gpus))
        return out

    def usable(self) -> Optional[float]:
        return self.budget_left()

    # --- order ----------------------------------------------------------------------------

    def order(self, queued: Sequence[ChainInfo], dry_run: bool = False) -> list[ChainInfo]:
        """The queued chains in the order to try them (skips first: admit marks them), and with
        --auto-repeat the chain the worker queues itself, placed after every chain the user queued
        (before them only with [planner] auto_repeat_first). `dry_run` (status): the same decision,
        nothing queued, saved or counted; `self.auto_next` says what auto-repeat would queue."""
        s = self.settings
        self.refresh(report=s.policy != policy.FIFO)
        usable = self.usable()
        basis = self._cost_basis(queued)
        ests = [self.chain_estimate(c) for c in queued]
        if not ests and basis is not None:  # nothing queued: what auto-repeat would add costs a chain like the last
            ests = [self.estimator.chain(basis.profile, basis.hparams, gpus=self.widths())]
        chain_s = max((sum(e.high_s for e in est) for est in ests), default=sum(self.settings.defaults.values()))
        chain_median_s = max((sum(e.median_s for e in est) for est in ests), default=chain_s)
        known = [e.name for e in self.compare.full] if self.compare is not None else []
        base = self.facts.baseline_label()
        if base and self.compare is not None and self.compare.baseline.source in ("runs", "runs+reference"):
            known.append(base)
        capped = s.auto_repeat_max is not None and self.extra_queued >= s.auto_repeat_max
        # queued chains as the compare report names them: their candidate (variant x code tree)
        live = [r.info for r in self.facts.running()] if s.policy == policy.ADAPTIVE else []
        ids = [c.chain_id for c in queued] + [c.chain_id for c in live]
        labels = self.facts.candidates(ids) if ids else {}
        items = [policy.QueuedItem(c.chain_id, labels.get(c.chain_id, c.variant), c.priority) for c in queued]
        advice, self.reevals = None, {}
        in_flight = dict(Counter(labels.get(c.chain_id, c.variant) for c in live))  # observations on their way
        if s.policy == policy.ADAPTIVE and not s.try_every_variant:  # objective verdicts: for what settles nothing
            self.reevals = self.facts.reeval_targets(self.runs)
            costs = (advise.costs_of(self.estimator, basis.profile, basis.hparams, self.widths(), s.layout.max_chains)
                     if basis is not None else advise.Costs(chain_s, s.defaults["eval"], chain_s))
            advice = advise.from_report(self.compare, costs, usable,
                                        list(dict.fromkeys(q.variant for q in items
                                                           if q.variant not in set(known) and q.variant not in in_flight)),
                                        self.reevals)

        def plan(auto_repeat: bool) -> policy.Plan:
            return policy.plan(items, self.compare, policy.PlanInputs(
                policy=s.policy, baseline=base, usable_s=usable, chain_s=chain_s, chain_median_s=chain_median_s,
                dropped=self.facts.dropped(), auto_repeat=auto_repeat, known_variants=known,
                voi=not s.try_every_variant, advice=advice, reevals=tuple(self.reevals), objective=s.objective,
                slots=s.layout.max_chains, in_flight=in_flight))

        # Auto-repeat chains go after the user's (unless they opted in), so while the user's chains
        # wait, the policy allocates among those alone.
        by_id = {c.chain_id: c for c in queued}
        users_wait = any(not c.auto for c in queued) and not s.auto_repeat_first
        p = plan(s.auto_repeat and not capped and not users_wait)
        if users_wait and s.auto_repeat and not capped and all(by_id[i].auto for i in p.order):
            p = plan(True)  # the user's chains are all skipped (worse, futile): they wait for nothing
        self.plan = p
        runnable = [by_id[i] for i in p.order]
        users = [c for c in runnable if not c.auto]
        ordered = [by_id[i] for i in p.skips] + users + [c for c in runnable if c.auto]
        self.auto_next, self.idle_note = None, None
        if s.auto_repeat and not runnable:
            if capped:
                if plan(True).extra is not None:
                    left = f"; {usable / 60:.0f} min left unused" if usable is not None else ""
                    self.idle_note = f"auto-repeat cap {s.auto_repeat_max} reached{left}: raise [planner] auto_repeat_max"
            elif p.extra is not None:
                self.auto_next = self._auto_next(p)
            elif s.policy != policy.FIFO and (usable is None or usable >= chain_s):
                self.idle_note = ("auto-repeat: no repeat has value in the time left ("
                                  + (p.extra_why or "compare's Next: has nothing that fits") + ")")
        elif s.auto_repeat and not capped and s.auto_repeat_first and p.extra is not None and p.extra_first:
            self.auto_next = self._auto_next(p)  # the user opted in: before their queued chains
        if dry_run:
            return ordered
        if self.idle_note is not None and self.idle_note != self._noted:
            self.report(self.idle_note)
        self._noted = self.idle_note
        if self.auto_next is not None:
            nxt = self.auto_next
            info = (self.facts.queue_reeval(nxt.train_id, nxt.why) if nxt.reeval
                    else self.facts.queue_repeat(nxt.variant, nxt.why))
            if info is None:
                self.idle_note = (f"auto-repeat picked {nxt.variant} but cannot queue it "
                                  f"({'its checkpoint cannot be evaluated again' if nxt.reeval else 'nothing of it to train'})")
            else:
                self.extra_queued += 1
                what = f"re-eval of chain {nxt.train_id}'s checkpoint" if nxt.reeval else f"seed {info.seed}"
                self.report(f"auto-repeat: queued chain {info.chain_id} {info.variant} {what} ({nxt.why})")
                at = len(p.skips) if users and s.auto_repeat_first else len(ordered)
                ordered.insert(at, info)
                p.order.insert(at - len(p.skips), info.chain_id)
        self._save_plan(p)
        return ordered

    def _cost_basis(self, queued: Sequence[ChainInfo]) -> Optional[ChainInfo]:
        """The chain whose learned durations price the ranking's actions: the first queued training,
        else the last one seen (or, for a fresh gate, the store's latest training): with nothing
        queued, `advise` must price a repeat as admission will, or auto-repeat would queue chains
        that admission then skips."""
        first = next((c for c in queued if not c.eval_only), None)
        if first is not None:
            self._basis = first
        elif self._basis is None:
            self._basis = self.facts.latest_training()
        return self._basis

    def _auto_next(self, p: policy.Plan) -> AutoNext:
        if p.extra_reeval:
            return AutoNext(p.extra, p.extra_why, True, self.reevals[p.extra].train_id)
        return AutoNext(p.extra, p.extra_why)

    def idle_reason(self) -> Optional[str]:
        """Why the worker idles with budget left, when the planner is the reason (a cap the user set)."""
        return self.idle_note

    def _save_plan(self, p: policy.Plan) -> None:
        s = self.settings
        doc = {"policy": s.policy, "futility": s.futility, "auto_repeat": s.auto_repeat,
               "auto_repeat_max": s.auto_repeat_max, "auto_repeat_first": s.auto_repeat_first,
               "try_every_variant": s.try_every_variant, "objective": s.objective, "auto_queued": self.extra_queued,
               "idle": self.idle_note, "layout": s.layout.to_json(), **p.to_json()}
        text = json.dumps(doc, sort_keys=True)
        if text != self._last_saved:
            self._last_saved = text
            try:
                self.facts.save_plan({**doc, "at": time.time()})
            except Exception as exc:  # status is a convenience; never stop the worker over it
                self.report(f"could not save the plan for status: {exc}")

    # --- admit ----------------------------------------------------------------------------

    def admit(self, chain: ChainInfo):
        if self.plan is not None and chain.chain_id in self.plan.skips:
            return Skip(self.plan.skips[chain.chain_id])
        usable = self.usable()
        if usable is not None and usable <= 0:
            return Skip("budget exhausted: no time left before the deadline margin")
        lay = self.settings.layout
        if lay.serial:  # one chain at a time: it starts now, on every device
            train, evaluate = self.chain_estimate(chain)
            fit = admission.admit_chain(train.high_s, evaluate.high_s, usable)
            return Start() if fit.ok else Skip(fit.reason)
        running = self.running_now()
        fit = self._fit_on_slot(chain, running, usable)
        if fit.ok:
            return Start()
        wider = self._wider(chain, running, usable)
        return wider if wider is not None else Skip(fit.reason)

    def _fit_on_slot(self, chain: ChainInfo, running, usable, at_least: int = 0) -> admission.Fit:
        """Can `chain` finish before the deadline on the GPUs it will get: its stages' high
        estimates on their GPU count, after the waits the slots' timeline projects for them
        behind the chains running now (opsdctl.plan.timeline.project, medians for those)."""
        train, evaluate = self.chain_estimate(chain, at_least)
        high = lambda e: replace(e, median_s=e.high_s)  # noqa: E731  (this chain: its high estimates)
        entry = timeline.project(None, running, [timeline.Queued(chain.chain_id, chain.variant, high(train),
                                                                 high(evaluate), at_least)],
                                 layout=self.settings.layout)[-1]
        if entry.end_in_s is None:
            return admission.Fit(False, train.high_s + evaluate.high_s, usable, "its GPUs never come free")
        return admission.fits_after_wait(train.high_s + evaluate.high_s, entry.end_in_s, usable)

    def _wider(self, chain: ChainInfo, running, usable) -> Optional[Start]:
        """Near the deadline: the narrowest wider slot (a multiple of gpus_per_chain, free now) on
        which a chain that no longer fits its own would, for the stages whose command takes
        {num_gpus} or {gpus}; None when there is none."""
        lay = self.settings.layout
        if not self.settings.widen or not lay.devices:
            return None
        n = len(lay.devices)
        for k in range(lay.width * 2, n + 1, lay.width):
            if n % k:
                continue
            fit = self._fit_on_slot(chain, running, usable, at_least=k)
            if fit.ok and fit.wait_s == 0:
                self.report(f"chain {chain.chain_id} {chain.variant}: does not fit on {lay.width} GPU(s) in the "
                            f"time left; runs on {k}")
                self._started_on[chain.chain_id] = k
                return Start(gpus=k)
        return None

    # --- grant ----------------------------------------------------------------------------

    def grant(self, chain: ChainInfo, stage: str):
        train, evaluate = self.chain_estimate(chain, self._started_on.get(chain.chain_id, 0))
        usable = self.usable()
        fit = (admission.admit_chain(train.high_s, evaluate.high_s, usable) if stage == "train"
               else admission.admit_eval(evaluate.high_s, usable))
        if not fit.ok:
            return Skip(fit.reason)
        if stage == "eval" and self.settings.futility and not chain.partial:  # a screening run is cheap already
            full = self.plan is not None and chain.variant in self.plan.full_eval  # the policy needs its full score
            self._futility[chain.chain_id] = None if full else self._futility_context()
        return Grant((), estimate_seconds=round((train if stage == "train" else evaluate).high_s, 1))

    # --- futility -------------------------------------------------------------------------

    def _futility_context(self) -> Optional[FutilityContext]:
        self.refresh()  # the report as it is when this eval starts
        return FutilityContext.from_report(self.compare)

    def on_progress(self, chain: ChainInfo, stage: str, record: dict):
        if not self.settings.futility or stage != "eval" or "problems" not in record:
            return None
        if chain.variant == self.facts.baseline_label():
            return None  # the baseline is not compared with itself
        ctx = self._futility.get(chain.chain_id)
        if ctx is None:
            return None
        look = judge_look(record, ctx)
        if look is None:
            return None
        self.looks.append((chain.chain_id, look))
        if look.stop:
            return Stop(look.reason(), State.STOPPED_FUTILE)
        self.report(f"chain {chain.chain_id}: look at k={look.k}: delta {look.delta:+.2f}, SE {look.se:.2f}: go on")
        return None

    # --- released -------------------------------------------------------------------------

    def released(self, chain: ChainInfo, stage: str, pids: Sequence[int]) -> None:
        return None  # the worker waits for the stage's GPU memory itself (opsdctl.daemon.gpu_gate)


# --- from the config ----------------------------------------------------------------------


def settings_from_config(cfg, layout: Layout = Layout()) -> PlannerSettings:
    from opsdctl.plan.durations import default_seconds

    pl = cfg.section("planner")
    return PlannerSettings(
        policy=pl.get("policy") or policy.FIFO,
        futility=bool(pl.get("futility")),
        auto_repeat=bool(pl.get("auto_repeat")),
        auto_repeat_max=None if pl.get("auto_repeat_max") is None else int(pl["auto_repeat_max"]),
        auto_repeat_first=bool(pl.get("auto_repeat_first")),
        try_every_variant=bool(pl.get("try_every_variant")),
        objective=pl.get("objective") or SUBMISSION,
        baseline=cfg.baseline_variant,
        reference=cfg.reference,
        defaults_s=tuple(default_seconds(cfg).items()),
        layout=layout,
        widen=tuple(st for st in ("train", "eval") if takes_gpu_count(cfg.stages[st].command)),
        poll_s=min(cfg.poll_seconds, 5.0),
    )


def with_overrides(cfg, *, policy_name: Optional[str] = None, futility: Optional[bool] = None,
                   auto_repeat: Optional[bool] = None, auto_repeat_first: Optional[bool] = None,
                   try_every_variant: Optional[bool] = None, objective: Optional[str] = None):
    """The config with `worker --policy/--futility/--auto-repeat/--auto-repeat-first/--try-every-variant/
    --objective` applied to [planner]."""
    sec = dict(cfg.section("planner"))
    for key, value in (("policy", policy_name), ("futility", futility), ("auto_repeat", auto_repeat),
                       ("auto_repeat_first", auto_repeat_first), ("try_every_variant", try_every_variant),
                       ("objective", objective)):
        if value is not None:
            sec[key] = value
    return replace(cfg, sections={**cfg.sections, "planner": sec})


def make_planner_gate(cfg, budget_left=None, store=None, report: Callable[[str], None] = lambda m: None,
                      layout: Layout = Layout()) -> PlannerGate:
    """The worker's gate over the worker's GPU layout (the daemon resolves the devices and hands
    it over: the planner never probes a GPU), the store as facts."""
    settings = settings_from_config(cfg, layout)
    facts = StoreFacts(cfg, store) if store is not None else NoFacts(cfg.baseline_variant)
    return PlannerGate(settings, facts, budget_left, report=report)
