"""How long an evaluation takes on one or several vLLM engines: pure functions, no GPU.

At AIME lengths (median ~12k tokens, cap 38,912) a decode step reads the whole KV cache of the
running sequences (112 KiB a token for Qwen3-1.7B's shapes), so a step's cost grows with the
tokens in flight, and an engine ends on a tail of a few long sequences. Three pieces:

- `LengthLaw` / `draw_lengths`: the assumed length of every (problem, sample): a per-problem
  log-normal base with a per-sample spread around it, capped like max_new_tokens;
- `StepCost` / `fit_step_cost`: seconds of one engine step as
  base + per_seq * b + per_ctx * T + per_gen * G + per_prefill * P + per_pair * A, with b the
  sequences that got a token, T their tokens in context, G their generated tokens, P the prompt
  (or recomputed) tokens prefilled and A the attention pairs of those prefills (L(L+1)/2 for a
  whole prefill of L tokens: long recomputes cost more than their length), fitted by
  non-negative least squares on measured steps;
- `simulate`: continuous batching as vLLM's V1 scheduler does it (running requests first, in
  admission order; a decode that finds no free KV block preempts the latest-admitted request,
  which later recomputes its whole context; waiting requests admitted in order while blocks, the
  sequence cap and the token budget allow, and not in a step that preempted), fed the way
  eval/worker.py feeds its engine (a micro-batch whenever (max_seqs - requests in the engine) //
  rows >= 1, chosen by eval.plan's dispatcher), on one engine or several sharing one dispatcher.
Steps between events (a finish, a preemption, an admission) are summed in closed form.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from eval.plan import Batch, Dispatcher, make_batches

# Qwen3-1.7B: K and V x 28 layers x 8 KV heads x head_dim 128 x 2 bytes (bf16)
KV_BYTES_PER_TOKEN = 2 * 28 * 8 * 128 * 2


@dataclass(frozen=True)
class LengthLaw:
    """Completion lengths: exp(N(log median, problem_sigma^2)) per problem, times
    exp(N(0, sample_sigma^2)) per sample, rounded, within [min_tokens, cap]."""

    median: float
    problem_sigma: float
    sample_sigma: float
    cap: int
    min_tokens: int = 16

    def scaled(self, factor: float) -> "LengthLaw":
        """The same law with every length divided by `factor` (the cap too)."""
        return LengthLaw(self.median / factor, self.problem_sigma, self.sample_sigma,
                         max(1, int(self.cap // factor)), max(1, int(self.min_tokens // factor)))


# AIME 2024 with Qwen3-1.7B in thinking mode: a median of ~12k tokens as researchers report it, capped by
# the protocol's max_new_tokens 38,912; the spreads are assumed (about 5% of samples reach the cap).
REAL_LAW = LengthLaw(median=12_000, problem_sigma=0.6, sample_sigma=0.35, cap=38_912)


def draw_lengths(law: LengthLaw, problem_ids: list[str], k: int, seed: int) -> dict[tuple[str, int], int]:
    """(problem id, sample) -> forced completion length, seeded."""
    rng = random.Random(seed)
    out = {}
    for pid in problem_ids:
        base = math.log(law.median) + rng.gauss(0.0, law.problem_sigma)
        for s in range(k):
            n = round(math.exp(base + rng.gauss(0.0, law.sample_sigma)))
            out[(pid, s)] = int(min(law.cap, max(law.min_tokens, n)))
    return out


def scale_lengths(lengths: dict, factor: float, min_tokens: int = 1) -> dict:
    """Every length divided by `factor` (rounded, at least `min_tokens`): the scaled twin of a draw."""
    return {key: max(min_tokens, round(n / factor)) for key, n in lengths.items()}


# --- the cost of one engine step --------------------------------------------------------------

FEATURES = ("base", "per_seq", "per_ctx", "per_gen", "per_prefill", "per_pair")


@dataclass(frozen=True)
class StepCost:
    base: float  # s per step (weights, launch, scheduler)
    per_seq: float  # s per sequence that got a token (its logits, sampling, output)
    per_ctx: float  # s per token of context read (the KV cache)
    per_gen: float  # s per generated token held (the engine's per-token bookkeeping)
    per_prefill: float  # s per token prefilled (prompts, recomputed contexts)
    per_pair: float = 0.0  # s per attention pair of a prefill (query token x earlier token)

    def seconds(self, b: float, ctx: float, gen: float, prefill: float, pairs: float = 0.0) -> float:
        return (self.base + self.per_seq * b + self.per_ctx * ctx + self.per_gen * gen + self.per_prefill * prefill
                + self.per_pair * pairs)

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in FEATURES}


@dataclass(frozen=True)
class StepTrace:
    """Measured engine steps, one entry per step: seconds, and the features of `StepCost`."""

    seconds: tuple[float, ...]
    seqs: tuple[int, ...]
    ctx: tuple[int, ...]
    gen: tuple[int, ...]
    prefill: tuple[int, ...]
    pairs: tuple[int, ...]

    @staticmethod
    def from_json(doc: dict) -> "StepTrace":
        return StepTrace(*(tuple(doc[key]) for key in ("seconds", "seqs", "ctx", "gen", "prefill", "pairs")))

    def __len__(self) -> int:
        return len(self.seconds)


def fit_step_cost(traces: list[StepTrace], use: tuple[str, ...] = FEATURES) -> StepCost:
    """Non-negative least squares of step seconds on the features in `use` (the others 0).
    Columns are scaled to unit maximum first, so seconds per token and per step fit alike."""
    import numpy as np
    from scipy.optimize import nnls

    cols = {name: [] for name in FEATURES}
    y = []
    for t in traces:
        cols["base"] += [1.0] * len(t)
        cols["per_seq"] += list(t.seqs)
        cols["per_ctx"] += list(t.ctx)
        cols["per_gen"] += list(t.gen)
        cols["per_prefill"] += list(t.prefill)
        cols["per_pair"] += list(t.pairs)
        y += list(t.seconds)
    if not y:
        raise ValueError("no measured steps to fit")
    names = [n for n in FEATURES if n in use]
    x = np.array([cols[n] for n in names], dtype=float).T
    scale = np.maximum(np.abs(x).max(axis=0), 1e-300)
    coef, _ = nnls(x / scale, np.array(y, dtype=float))
    fitted = dict(zip(names, coef / scale))
    return StepCost(**{n: float(fitted.get(n, 0.0)) for n in FEATURES})


def trace_seconds(cost: StepCost, trace: StepTrace) -> float:
    """What the cost model says the measured steps took, summed."""
    return sum(cost.seconds(*x) for x in zip(trace.seqs, trace.ctx, trace.gen, trace.prefill, trace.pairs))


# --- the scheduler ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineSpec:
    max_seqs: int  # vLLM max_num_seqs (the evaluator's 64); the worker keeps at most this many requests in
    kv_blocks: int  # KV cache blocks on the GPU (vLLM's num_gpu_blocks)
    block_size: int = 16
    token_budget: int = 8192  # max_num_batched_tokens: tokens one step may compute

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.block_size


@dataclass
class _Req:
    problem: int
    pid: str
    prompt: int
    target: int  # tokens to generate
    gen: int = 0
    blocks: int = 0
    prefill_total: int = 0
    prefill_left: int = 0  # > 0: still prefilling (its first time, or a recompute after preemption)


@dataclass
class EngineRun:
    """What one simulated engine did."""

    end_s: float = 0.0
    steps: int = 0
    tokens: int = 0
    preemptions: int = 0
    finished: int = 0


@dataclass(frozen=True)
class SimResult:
    wall_s: float  # the last engine's last finish
    engines: tuple[EngineRun, ...]
    tokens: int
    samples: int
    stopped_early: bool = False

    def to_json(self) -> dict:
        return {"wall_s": round(self.wall_s, 3), "tokens": self.tokens, "samples": self.samples,
                "stopped_early": self.stopped_early,
                "engines": [{"end_s": round(e.end_s, 3), "steps": e.steps, "tokens": e.tokens,
                             "preemptions": e.preemptions, "finished": e.finished} for e in self.engines]}


def _blocks(tokens: int, size: int) -> int:
    return -(-tokens // size)


def _pairs(start: int, chunk: int) -> int:
    """Attention pairs of prefilling tokens start+1 .. start+chunk (each sees itself and all before)."""
    return chunk * start + chunk * (chunk + 1) // 2


class _Engine:
    def __init__(self, spec: EngineSpec, cost: StepCost):
        self.spec, self.cost = spec, cost
        self.clock = 0.0
        self.running: list[_Req] = []  # admission order: the last one is preempted first
        self.waiting: deque[_Req] = deque()
        self.free = spec.kv_blocks
        self.run = EngineRun()
        self.done: list[_Req] = []  # finished at the last step, not yet reported

    @property
    def in_engine(self) -> int:
        return len(self.running) + len(self.waiting)

    def add(self, req: _Req) -> None:
        self.waiting.append(req)

    def _preempt(self, req: _Req) -> None:
        self.free += req.blocks
        req.blocks = 0
        req.prefill_left = 0
        self.waiting.appendleft(req)  # first in line again; it recomputes its context
        self.run.preemptions += 1

    def _admissible(self) -> bool:
        if not self.waiting or len(self.running) >= self.spec.max_seqs:
            return False
        head = self.waiting[0]
        budget = self.spec.token_budget - len(self.running)
        chunk = min(head.prompt + head.gen, budget)
        return chunk > 0 and _blocks(chunk, self.spec.block_size) <= self.free

    def step(self) -> None:
        """One engine step, exactly."""
        bs = self.spec.block_size
        budget = self.spec.token_budget
        produced: list[_Req] = []
        prefill = pairs = 0
        preempted = False
        i = 0
        while i < len(self.running):
            r = self.running[i]
            chunk = min(r.prefill_left, budget) if r.prefill_left else 1
            if chunk <= 0 or budget <= 0:
                i += 1
                continue
            held = r.prefill_total - r.prefill_left + chunk if r.prefill_left else r.prompt + r.gen
            need = _blocks(held, bs) - r.blocks
            victim = None
            while need > self.free and victim is not r:
                victim = self.running.pop()  # the latest admitted, possibly r itself
                self._preempt(victim)
                preempted = True
            if victim is r:
                break
            self.free -= need
            r.blocks += need
            budget -= chunk
            if r.prefill_left:
                pairs += _pairs(r.prefill_total - r.prefill_left, chunk)
                r.prefill_left -= chunk
                prefill += chunk
                if r.prefill_left == 0:
                    r.gen += 1
                    produced.append(r)
            else:
                r.gen += 1
                produced.append(r)
            i += 1
        while not preempted and self.waiting and len(self.running) < self.spec.max_seqs and budget > 0:
            r = self.waiting[0]
            total = r.prompt + r.gen  # a first prefill, or a recompute of everything so far
            chunk = min(total, budget)
            need = _blocks(chunk, bs)
            if need > self.free:
                break
            self.waiting.popleft()
            self.running.append(r)
            r.prefill_total, r.prefill_left, r.blocks = total, total - chunk, need
            self.free -= need
            budget -= chunk
            prefill += chunk
            pairs += _pairs(0, chunk)
            if r.prefill_left == 0:
                r.gen += 1
                produced.append(r)
        b = len(produced)
        ctx = sum(r.prompt + r.gen for r in produced)
        gen = sum(r.gen for r in produced)
        self.clock += self.cost.seconds(b, ctx, gen, prefill, pairs)
        self.run.steps += 1
        self.run.tokens += b
        self._finish([r for r in produced if r.gen >= r.target])

    def _finish(self, finished: list[_Req]) -> None:
        for r in finished:
            self.running.remove(r)
            self.free += r.blocks
            r.blocks = 0
        self.done += finished
        self.run.finished += len(finished)
        if finished:
            self.run.end_s = self.clock

    def _safe_steps(self, limit: int) -> int:
        """How many decode steps (at most `limit`) the free blocks carry every running request through."""
        bs, held = self.spec.block_size, sum(r.blocks for r in self.running)

        def fits(n: int) -> bool:
            return sum(_blocks(r.prompt + r.gen + n - 1, bs) for r in self.running) - held <= self.free

        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _steps_until(self, until: float, limit: int, b: int, ctx0: int, gen0: int) -> int:
        """The most decode steps (at most `limit`) that end by `until`."""
        c = self.cost

        def took(n: int) -> float:
            ramp = b * n * (n + 1) / 2  # the b tokens each step adds, summed over n steps
            return n * (c.base + c.per_seq * b) + c.per_ctx * (n * ctx0 + ramp) + c.per_gen * (n * gen0 + ramp)

        if until == math.inf or self.clock + took(limit) <= until:
            return limit
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.clock + took(mid) <= until:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def jump(self, until: float = math.inf) -> bool:
        """Decode steps up to the next finish (or `until`) in closed form, when nothing else can
        happen first (no prefill in flight, no admission possible). False: an exact step is due."""
        if not self.running or any(r.prefill_left for r in self.running) or self._admissible():
            return False
        b, bs = len(self.running), self.spec.block_size
        ctx0 = sum(r.prompt + r.gen for r in self.running)
        gen0 = sum(r.gen for r in self.running)
        n = self._safe_steps(min(r.target - r.gen for r in self.running))
        n = self._steps_until(until, n, b, ctx0, gen0) if n else 0
        if n < 1:
            return False
        ramp = b * n * (n + 1) / 2
        c = self.cost
        self.clock += n * (c.base + c.per_seq * b) + c.per_ctx * (n * ctx0 + ramp) + c.per_gen * (n * gen0 + ramp)
        for r in self.running:
            r.blocks = _blocks(r.prompt + r.gen + n - 1, bs)
            r.gen += n
        self.free = self.spec.kv_blocks - sum(r.blocks for r in self.running)
        self.run.steps += n
        self.run.tokens += n * b
        self._finish([r for r in self.running if r.gen >= r.target])
        return True

    def advance(self, until: float = math.inf) -> list[_Req]:
        """Steps until a request finishes (or the clock reaches `until`); returns those finished."""
        while self.in_engine and not self.done and self.clock < until:
            if not self.jump(until):
                self.step()
        done, self.done = self.done, []
        return done


@dataclass
class Workload:
    """Micro-batches as the evaluator plans them, with every sample's forced length."""

    batches: list[Batch]
    problem_ids: list[str]
    prompt_tokens: list[int]  # per problem index
    lengths: dict  # (problem id, sample) -> completion tokens
    proxy: list[float] = field(default_factory=list)  # dispatch's stand-in lengths (problem text sizes)

    @property
    def rows_per_batch(self) -> int:
        return max(len(b.samples) for b in self.batches)

    @property
    def samples(self) -> int:
        return sum(len(b.samples) for b in self.batches)

    @property
    def tokens(self) -> int:
        return sum(self.lengths[(b.problem_id, s)] for b in self.batches for s in b.samples)


def plan_workload(problem_ids: list[str], k: int, seed: int, prompt_tokens: list[int], lengths: dict,
                  proxy: list[float] | None = None, share: tuple[int, int] | None = None) -> Workload:
    """The evaluator's micro-batches (eval.plan.make_batches); `share` = (i, n) keeps every n-th batch
    from the i-th: one engine's part of an n-engine evaluation."""
    batches = make_batches(problem_ids, k, seed)
    if share is not None:
        i, n = share
        batches = batches[i::n]
    return Workload(batches, list(problem_ids), list(prompt_tokens), dict(lengths),
                    list(proxy) if proxy else [1.0] * len(problem_ids))


def simulate(work: Workload, spec: EngineSpec, cost: StepCost, engines: int = 1,
             until_s: float | None = None) -> SimResult:
    """The workload through `engines` engines that share one dispatcher (eval.plan.Dispatcher, as
    the evaluator's shared queue): seconds until the last sample is done; with `until_s`, what
    was generated by then (a run cut short)."""
    longest = max(work.prompt_tokens[b.problem] + work.lengths[(b.problem_id, s)] for b in work.batches for s in b.samples)
    if longest > spec.kv_tokens:
        raise ValueError(f"a sample of {longest} tokens cannot fit a KV cache of {spec.kv_tokens} tokens")
    until = math.inf if until_s is None else until_s
    dispatcher = Dispatcher(list(work.batches), proxy=list(work.proxy))
    rows = work.rows_per_batch
    sims = [_Engine(spec, cost) for _ in range(engines)]

    def feed(e: _Engine) -> None:
        while (spec.max_seqs - e.in_engine) // rows >= 1 and (b := dispatcher.next()) is not None:
            for s in b.samples:
                e.add(_Req(b.problem, b.problem_id, work.prompt_tokens[b.problem], work.lengths[(b.problem_id, s)]))

    pending: list[tuple[float, int, list[_Req]]] = [(0.0, i, []) for i in range(engines)]
    samples = 0
    while pending:
        pending.sort(key=lambda x: (x[0], x[1]))
        _, i, finished = pending.pop(0)
        for r in finished:  # reported at their finish time, in time order across engines
            dispatcher.record(r.problem, r.target)
        samples += len(finished)
        e = sims[i]
        feed(e)
        if e.in_engine and e.clock < until:
            pending.append((e.clock, i, e.advance(until)))
    runs = tuple(e.run for e in sims)
    stopped = until_s is not None and any(e.in_engine for e in sims)
    wall = until_s if stopped else max((r.end_s for r in runs), default=0.0)
    return SimResult(wall, runs, sum(r.tokens for r in runs), samples, stopped)
