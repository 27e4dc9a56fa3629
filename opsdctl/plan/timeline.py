"""The projected timeline: when each queued chain would start and end, on which GPUs, and which
will not fit.

`project` replays the worker on estimates; `slot_timelines` cuts its result per GPU slot. The
"planner" section of `opsdctl status` (opsdctl.plan.planner_status) and admission on slots
(opsdctl.plan.planner) both read it.

Pure: seconds from now, estimates in, one list out. It replays what the worker will do, on
median estimates: the running chains first (each stage's remaining time from its median and
its elapsed time, on the GPUs it holds), then the queued chains in the planned order, each
claimed when fewer chains run than the layout holds (opsdctl.plan.slots) and each of its stages
started when the GPU pool's first-come-first-served line reaches it and its aligned block is
free (slots.pick_block: the pool's own rule). With one chain at a time (gpus_per_chain unset, or
no GPUs) that is the queue back to back. A chain that the policy will skip, or whose
high-quantile estimate does not fit in the usable time left when it is claimed, is marked and
takes no GPU time (the worker skips it and goes on to the next one).
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional, Sequence

from opsdctl.plan.admission import admit_chain
from opsdctl.plan.durations import Estimate
from opsdctl.plan.slots import Layout, pick_block, slot_of


@dataclass(frozen=True)
class Running:
    chain_id: int
    variant: str
    stage: Optional[str]  # None: claimed, waiting for its first grant
    stage_elapsed_s: float
    train: Estimate
    eval: Estimate
    gpus: tuple[int, ...] = ()  # the GPUs its stage holds now


@dataclass(frozen=True)
class Queued:
    chain_id: int
    variant: str
    train: Estimate
    eval: Estimate
    gpus: int = 0  # every stage on at least this many GPUs (a wider slot near the deadline); 0: the layout's


@dataclass(frozen=True)
class Lane:
    """One stage of a chain on its GPUs, from start to end (seconds from now)."""

    stage: str
    start_in_s: float
    end_in_s: float
    gpus: tuple[int, ...]

    def to_json(self) -> dict:
        return {"stage": self.stage, "start_in_s": round(self.start_in_s, 1), "end_in_s": round(self.end_in_s, 1),
                "gpus": list(self.gpus)}


@dataclass(frozen=True)
class Entry:
    chain_id: int
    variant: str
    state: str  # "running" | "queued"
    start_in_s: Optional[float]
    end_in_s: Optional[float]
    median_s: float
    high_s: float
    fits: bool
    reason: Optional[str]  # why it will not run (skip by policy, or does not fit)
    stages: tuple[Lane, ...] = ()  # its stages still to run (or running), on their GPUs

    @property
    def gpus(self) -> tuple[int, ...]:
        return self.stages[0].gpus if self.stages else ()

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("start_in_s", "end_in_s", "median_s", "high_s"):
            if d[k] is not None:
                d[k] = round(d[k], 1)
        d["stages"] = [lane.to_json() for lane in self.stages]
        d["gpus"] = list(self.gpus)
        return d


def remaining_s(r: Running) -> float:
    """Median time left of a running chain (a stage past its median is assumed nearly done)."""
    if r.stage == "eval":
        return max(0.0, r.eval.median_s - r.stage_elapsed_s)
    if r.stage == "train":
        return max(0.0, r.train.median_s - r.stage_elapsed_s) + r.eval.median_s
    return r.train.median_s + r.eval.median_s


@dataclass
class _Plan:
    """A chain in the replay: its stages left as (name, median seconds, GPUs)."""

    chain_id: int
    variant: str
    state: str
    stages: list
    median_s: float
    high_s: float
    lanes: list = field(default_factory=list)
    last_gpus: tuple = ()


def _stages(train: Estimate, evaluate: Estimate, layout: Layout, at_least: int = 0) -> list:
    out = [] if train.key == "none" else [("train", train.median_s)]
    out.append(("eval", evaluate.median_s))
    return [(name, secs, max(layout.gpus_of(name), at_least) if layout.devices else 0) for name, secs in out]


def project(
    usable_s: Optional[float],
    running: Sequence[Running],
    queued: Sequence[Queued],
    skips: Optional[Mapping[int, str]] = None,
    layout: Layout = Layout(),
) -> list[Entry]:
    """The timeline from now (t = 0). `usable_s`: usable seconds left now (None: no budget)."""
    skips = skips or {}
    held: dict[int, int] = {}  # device -> chain id
    line: list[_Plan] = []  # chains whose next stage waits for its GPUs, first come first served
    ends: list[tuple[float, int, int]] = []  # (t, seq, chain id) of running stages
    plans: dict[int, _Plan] = {}
    done: dict[int, Entry] = {}
    order: list[int] = []
    seq = 0

    def start(p: _Plan, t: float, gpus: tuple) -> None:
        nonlocal seq
        name, secs, _ = p.stages.pop(0)
        for g in gpus:
            held[g] = p.chain_id
        p.lanes.append(Lane(name, t, t + secs, gpus))
        p.last_gpus = gpus
        seq += 1
        heapq.heappush(ends, (t + secs, seq, p.chain_id))

    for r in running:
        p = _Plan(r.chain_id, r.variant, "running", [], r.train.median_s + r.eval.median_s,
                  r.train.high_s + r.eval.high_s)
        p.stages = _stages(r.train, r.eval, layout)
        if r.stage == "eval":
            p.stages = [(n, max(0.0, s - r.stage_elapsed_s), k) for n, s, k in p.stages if n == "eval"]
        elif r.stage == "train":
            p.stages = [(n, max(0.0, s - r.stage_elapsed_s) if n == "train" else s, k) for n, s, k in p.stages]
        plans[p.chain_id] = p
        order.append(p.chain_id)
        if r.stage is None:
            line.append(p)
        else:
            gpus = tuple(g for g in r.gpus if g in layout.devices and g not in held)
            start(p, 0.0, gpus)
    pending = list(queued)
    t = 0.0
    while True:
        while pending and len([p for p in plans.values() if p.chain_id not in done]) < layout.max_chains:
            q = pending.pop(0)
            median, high = q.train.median_s + q.eval.median_s, q.train.high_s + q.eval.high_s
            order.append(q.chain_id)
            if q.chain_id in skips:
                done[q.chain_id] = Entry(q.chain_id, q.variant, "queued", None, None, median, high, False,
                                         skips[q.chain_id])
                continue
            fit = admit_chain(q.train.high_s, q.eval.high_s, None if usable_s is None else usable_s - t)
            if not fit.ok:
                done[q.chain_id] = Entry(q.chain_id, q.variant, "queued", None, None, median, high, False,
                                         f"will not fit: {fit.reason} at its turn")
                continue
            p = _Plan(q.chain_id, q.variant, "queued", _stages(q.train, q.eval, layout, q.gpus), median, high)
            plans[p.chain_id] = p
            line.append(p)
        while line:  # the pool serves its line in order; the head waits for its block
            head = line[0]
            k = head.stages[0][2]
            gpus = pick_block(layout, held, k, head.last_gpus) if k else ()
            if gpus is None:
                break
            line.pop(0)
            start(head, t, gpus)
        if not ends:
            break
        t, _, cid = heapq.heappop(ends)
        p = plans[cid]
        for g in p.lanes[-1].gpus:
            held.pop(g, None)
        if p.stages:
            line.append(p)
        else:
            first = p.lanes[0].start_in_s if p.lanes else t
            done[cid] = Entry(cid, p.variant, p.state, 0.0 if p.state == "running" else first, t, p.median_s,
                              p.high_s, True, None, tuple(p.lanes))
    for cid in order:  # what the replay could not place (no layout holds it) ends nowhere
        if cid not in done:
            p = plans[cid]
            done[cid] = Entry(cid, p.variant, p.state, None, None, p.median_s, p.high_s, False,
                              "its GPUs never come free", tuple(p.lanes))
    return [done[cid] for cid in order]


def slot_timelines(entries: Sequence[Entry], layout: Layout) -> list[dict]:
    """Each GPU slot's projected timeline: the stages that run on its GPUs, in time order (a
    stage wider than a slot shows in each slot it spans)."""
    if not layout.devices:
        return []
    lanes: list[list[dict]] = [[] for _ in layout.slots]
    for e in entries:
        for lane in e.stages:
            for i in sorted({slot_of(layout, (g,)) for g in lane.gpus} - {None}):
                lanes[i].append({"chain_id": e.chain_id, "variant": e.variant, **lane.to_json()})
    return [{"slot": i, "gpus": list(slot), "timeline": sorted(lanes[i], key=lambda d: d["start_in_s"])}
            for i, slot in enumerate(layout.slots)]
