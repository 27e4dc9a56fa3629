"""The work plan: items, their seeds, micro-batches, rounds, looks and dispatch order. Pure.

- An item is one (problem, sample index) pair. Its seed is a stable hash of (seed, problem id,
  sample index), so a sample's randomness does not depend on who computes it or when.
- A re-evaluation of a scored checkpoint is a fresh draw (1, 2, ...): it samples from
  `draw_seed(seed, draw)` instead of `seed`, so its samples are new and its problems and k the same.
- The k samples of each problem are split into three rounds (thirds of k: 0-3, 4-7, 8-11 for
  k = 12). A micro-batch holds samples of ONE problem in ONE round (at most `batch_size` of
  them); its composition depends on the benchmark, k and batch_size only, never on the worker
  count or on what is already done, so a batch always computes the same numbers.
- Dispatch is sample-major: every batch of round r goes out before any of round r+1, so when
  the first third of the work is finished every problem has k/3 samples (a "look" the
  planner's futility rule reads). Inside a round the longest-expected batch goes first.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

N_ROUNDS = 3
SEED_BITS = 63
DRAW_SEED_BITS = 31  # a draw's seed also seeds the vLLM engine: fits any engine's int32 seed


def item_seed(seed: int, problem_id: str, sample: int) -> int:
    """Stable across processes and Python versions (never Python's salted hash())."""
    digest = hashlib.sha256(f"{seed}\x1f{problem_id}\x1f{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << SEED_BITS) - 1)


def draw_seed(seed: int, draw: int) -> int:
    """The sampling seed of fresh draw `draw` of an evaluation at `seed`; draw 0 is `seed` itself.

    A stable hash of (seed, draw) into [0, 2**31), stepping over `seed` so that a later draw
    never repeats the first one's samples (distinct draws collide with chance ~2**-31 a pair).
    """
    if draw < 0:
        raise ValueError(f"draw {draw}: must be 0 or more")
    if draw == 0:
        return seed
    digest = hashlib.sha256(f"eval-draw\x1f{seed}\x1f{draw}".encode()).digest()
    value = int.from_bytes(digest[:8], "big") % ((1 << DRAW_SEED_BITS) - 1)  # one short: room to step over seed
    return value + 1 if 0 <= seed <= value else value


def round_bounds(k: int) -> list[int]:
    """Sample-index boundaries of the rounds: [0, k/3, 2k/3, k] (floors; empty rounds dropped)."""
    bounds = [(j * k) // N_ROUNDS for j in range(N_ROUNDS + 1)]
    return sorted(set(bounds))


def look_points(k: int) -> list[int]:
    """The k values at which a look record is written (the inner round boundaries)."""
    return [b for b in round_bounds(k) if 0 < b < k]


@dataclass(frozen=True)
class Batch:
    bid: str  # stable name: "<problem id>#<first sample>"
    problem: int  # index into the problem list
    problem_id: str
    round: int
    samples: tuple[int, ...]
    seeds: tuple[int, ...]


def make_batches(problem_ids: list[str], k: int, seed: int, batch_size: int | None = None) -> list[Batch]:
    """Every micro-batch of the run, in (round, problem) order."""
    bounds = round_bounds(k)
    out = []
    for r in range(len(bounds) - 1):
        lo, hi = bounds[r], bounds[r + 1]
        size = batch_size or (hi - lo)
        for p, pid in enumerate(problem_ids):
            for start in range(lo, hi, size):
                samples = tuple(range(start, min(hi, start + size)))
                out.append(Batch(f"{pid}#{start}", p, pid, r, samples,
                                 tuple(item_seed(seed, pid, s) for s in samples)))
    return out


@dataclass
class Dispatcher:
    """Chooses the next batch to hand out: the current round first, longest expected first.

    `done_tokens[p]` holds the token counts of problem p's finished samples (from this run and
    earlier ones); `proxy[p]` is a stand-in length (the problem's size) for problems not yet
    measured, rescaled into tokens once some problem has been measured.
    """

    batches: list[Batch]
    proxy: list[float]
    done_tokens: dict[int, list[int]] = field(default_factory=dict)
    pending: list[Batch] = field(init=False)

    def __post_init__(self):
        self.pending = list(self.batches)
        self._order = {b.bid: i for i, b in enumerate(self.batches)}

    def record(self, problem: int, n_tokens: int) -> None:
        self.done_tokens.setdefault(problem, []).append(n_tokens)

    def expected(self, problem: int) -> float:
        got = self.done_tokens.get(problem)
        if got:
            return sum(got) / len(got)
        measured = [(sum(v) / len(v), self.proxy[p]) for p, v in self.done_tokens.items() if v]
        if not measured:
            return self.proxy[problem]
        tokens_per_proxy = sum(t for t, _ in measured) / max(1e-9, sum(x for _, x in measured))
        return self.proxy[problem] * tokens_per_proxy

    def next(self) -> Batch | None:
        if not self.pending:
            return None
        rnd = min(b.round for b in self.pending)
        # Longest expected first; ties in the stable plan order.
        best = max((b for b in self.pending if b.round == rnd),
                   key=lambda b: (self.expected(b.problem), -self._order[b.bid]))
        self.pending.remove(best)
        return best

    def __len__(self) -> int:
        return len(self.pending)


def round_robin(batches: list[Batch], n_workers: int) -> list[list[Batch]]:
    """The users' status quo, for comparison: problems sharded round-robin over workers."""
    shards: list[list[Batch]] = [[] for _ in range(n_workers)]
    for b in batches:
        shards[b.problem % n_workers].append(b)
    return shards
