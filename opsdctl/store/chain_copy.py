"""A fresh queued copy of a chain: `requeue` makes one of a finished chain, the worker one of a
chain it interrupted (its worker died or stopped), pointing at the old row."""

from __future__ import annotations

from typing import Optional

from opsdctl.store.engine import get_chain
from opsdctl.store.models import Chain, utcnow
from opsdctl.store.states import State, transition


def copy_chain(session, old: Chain, priority: Optional[int] = None) -> Chain:
    new = Chain(
        variant_id=old.variant_id,
        seed=old.seed,
        repeat=old.repeat,
        priority=old.priority if priority is None else priority,
        seq=old.seq,  # keeps its place in the queue
        state=State.QUEUED.value,
        profile=old.profile,
        snapshot_id=old.snapshot_id,
        code_dir=old.code_dir,
        stage_spec=old.stage_spec,
        commands_hash=old.commands_hash,
        requeued_from=old.id,
        queued_at=utcnow(),
        eval_problems=old.eval_problems,
        eval_k=old.eval_k,
        eval_only=old.eval_only,
        checkpoint=old.checkpoint,
        trained_by=old.trained_by,
        eval_draw=old.eval_draw,  # a re-eval cut short is the same draw again
    )
    session.add(new)
    session.flush()
    return new


def interrupt_and_requeue(session, chain: Chain, reason: str, requeue: bool) -> Optional[Chain]:
    """running -> interrupted (guarded); optionally a fresh queued copy pointing at it."""
    if not transition(session, chain.id, State.RUNNING, State.INTERRUPTED, reason=reason):
        return None
    if not requeue:
        return None
    fresh = get_chain(session, chain.id)
    return copy_chain(session, fresh)
