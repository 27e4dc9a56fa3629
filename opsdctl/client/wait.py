"""`opsdctl wait`: block until chains end, for scripts and research agents.

Reads the store only (the worker does the work). A chain ends in one of the terminal states;
one that ended `interrupted` and was re-queued (a worker died or hit an error: a fresh chain
with `requeued_from` pointing at it) is followed to its re-run, since that is where its outcome
will be. `--all` waits until nothing is queued or running, counting chains queued meanwhile
(the adaptive worker's auto-repeats too).

The outcome is ok when every chain succeeded or was stopped as futile (a deliberate planner
outcome with its partial score kept); failed, cancelled, skipped and interrupted-not-re-queued
chains make it not ok.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from opsdctl.errors import UserError
from opsdctl.client.worker_view import worker_view
from opsdctl.store.reader import Reader
from opsdctl.store.values import iso
from opsdctl.store.states import ACTIVE, State

ACTIVE_STATES = frozenset(st.value for st in ACTIVE)
OK_STATES = frozenset({State.SUCCEEDED.value, State.STOPPED_FUTILE.value})
EXIT_FAILED = 1
EXIT_TIMEOUT = 124  # as coreutils' timeout: the chains are still running, untouched


@dataclass
class WaitResult:
    chains: list[dict] = field(default_factory=list)  # one per chain waited for, in id order
    timed_out: bool = False
    waited_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(c["state"] in OK_STATES for c in self.chains)

    @property
    def exit_code(self) -> int:
        return EXIT_TIMEOUT if self.timed_out else 0 if self.ok else EXIT_FAILED

    def to_json(self) -> dict:
        return {"ok": self.ok, "timed_out": self.timed_out, "waited_seconds": round(self.waited_seconds, 1),
                "chains": self.chains}


def _view(reader: Reader, asked: int, chain) -> dict:
    v = reader.variant(chain.variant_id)
    score = reader.score_of(chain.id)
    return {"chain_id": asked, "final_chain_id": chain.id, "variant": v.label, "seed": chain.seed,
            "state": chain.state, "stage": chain.stage, "reason": chain.reason,
            "score": None if score is None else round(score.avg_at_k, 4), "k": score.k if score else None,
            "partial": bool(score.partial) if score else None, "finished_at": iso(chain.finished_at),
            "progress": None}


def _follow(reader: Reader, chain):
    """The chain whose outcome stands for `chain`: its re-run when it was interrupted and re-queued."""
    seen = {chain.id}
    while chain.state == State.INTERRUPTED.value:
        nxt = reader.requeued_as(chain.id)
        if nxt is None or nxt.id in seen:
            break
        seen.add(nxt.id)
        chain = nxt
    return chain


def wait_chains(
    reader: Reader,
    chain_ids: Optional[Sequence[int]],
    timeout_s: Optional[float] = None,
    poll_s: float = 1.0,
    on_tick: Optional[Callable[[list[dict], dict], None]] = None,
) -> WaitResult:
    """Wait for `chain_ids` (None: every chain queued or running, now and until none is) to end.

    on_tick(views of the chains still active, the worker's view) is called at every poll."""
    tracked: list[int] = []
    with reader.snapshot():
        if chain_ids is None:
            tracked = reader.active_chain_ids()
        else:
            for cid in chain_ids:
                if reader.find_chain(cid) is None:
                    raise UserError(f"chain {cid} does not exist; `opsdctl status --all` lists the chains")
                if cid not in tracked:
                    tracked.append(cid)
    start = time.monotonic()
    while True:
        with reader.snapshot():
            if chain_ids is None:
                tracked += [cid for cid in reader.active_chain_ids() if cid not in tracked]
            views, pending = [], []
            for cid in tracked:
                chain = _follow(reader, reader.find_chain(cid))
                view = _view(reader, cid, chain)
                (pending if chain.state in ACTIVE_STATES else views).append(view)
                if chain.state == State.RUNNING.value:
                    cur = next((st for st in reversed(reader.stages_of(chain.id)) if st.name == chain.stage), None)
                    view["progress"] = cur.progress if cur is not None else None
            worker = worker_view(reader.latest_worker())
        waited = time.monotonic() - start
        if not pending:
            return WaitResult(sorted(views, key=lambda v: v["chain_id"]), False, waited)
        if timeout_s is not None and waited >= timeout_s:
            return WaitResult(sorted(views + pending, key=lambda v: v["chain_id"]), True, waited)
        if on_tick is not None:
            on_tick(pending, worker)
        left = None if timeout_s is None else timeout_s - waited
        time.sleep(poll_s if left is None else max(0.0, min(poll_s, left)))
