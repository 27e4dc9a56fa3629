"""Chain states: one enum, one table of allowed transitions, guarded updates.

A transition is a single `UPDATE chain SET state = new WHERE id = ? AND state = expected`,
so two processes racing (the worker finishing a stage, `opsdctl cancel` from a shell) can never
both win: the loser's UPDATE matches no row and it sees that it lost.
"""

from __future__ import annotations

import enum

from opsdctl.errors import one_line


class State(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"
    STOPPED_FUTILE = "stopped-futile"  # the planner stopped a losing evaluation (partial score kept)

    def __str__(self) -> str:
        return self.value


# Allowed moves. `running -> skipped` is the gate refusing a later stage (e.g. the GPUs never
# freed up before the eval stage); `queued -> skipped` is admission refusing the chain;
# `running -> stopped-futile` is the planner's futility rule stopping a losing evaluation.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.RUNNING, State.CANCELLED, State.SKIPPED}),
    State.RUNNING: frozenset(
        {State.SUCCEEDED, State.FAILED, State.CANCELLED, State.INTERRUPTED, State.SKIPPED, State.STOPPED_FUTILE}
    ),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
    State.INTERRUPTED: frozenset(),
    State.SKIPPED: frozenset(),
    State.STOPPED_FUTILE: frozenset(),
}

TERMINAL: frozenset[State] = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
ACTIVE: frozenset[State] = frozenset({State.QUEUED, State.RUNNING})


class IllegalTransition(RuntimeError):
    """A programming error: code asked for a move the table does not allow."""


def check_transition(old: State, new: State) -> None:
    if new not in TRANSITIONS[State(old)]:
        raise IllegalTransition(f"chain state {old} -> {new} is not an allowed transition")


# Stage rows have their own, smaller life: running, then one terminal outcome.
class StageState(str, enum.Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"  # stopped by a policy (the planner's futility rule)

    def __str__(self) -> str:
        return self.value


def transition(session, chain_id: int, expected, new: State, *, reason: str | None = None, **values) -> bool:
    """Move chain `chain_id` from one of `expected` to `new` in one guarded UPDATE.

    Returns False (and changes nothing) when the chain is not in an expected state any more:
    someone else moved it first. Records the move in the transition table, and a chain's end in
    the [notify] outbox.
    """
    from sqlalchemy import select, update

    from opsdctl.store import outbox
    from opsdctl.store.models import Chain, Transition, utcnow
    from opsdctl.store.outbox import CHAIN_END_EVENTS

    expected = (expected,) if isinstance(expected, (State, str)) else tuple(expected)
    expected = tuple(State(e) for e in expected)
    for old in expected:
        check_transition(old, new)
    current = session.scalar(select(Chain.state).where(Chain.id == chain_id))
    if current is None or State(current) not in expected:
        return False
    if new in TERMINAL:
        values.setdefault("finished_at", utcnow())
    result = session.execute(
        update(Chain)
        .where(Chain.id == chain_id, Chain.state == current)
        .values(state=new.value, reason=one_line(reason) if reason else reason, **values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return False
    session.add(Transition(chain_id=chain_id, from_state=current, to_state=new.value, reason=reason))
    if new.value in CHAIN_END_EVENTS:  # the [notify] event, in this same transaction
        outbox.record(session, CHAIN_END_EVENTS[new.value], f"chain:{chain_id}:{new.value}",
                      {"chain_id": chain_id, "from": current, "state": new.value, "reason": reason})
    # Keep any Chain object already loaded in this session in step with the row.
    from sqlalchemy.orm.attributes import set_committed_value

    for obj in list(session.identity_map.values()):
        if isinstance(obj, Chain) and obj.id == chain_id:
            for key, value in dict(values, state=new.value, reason=reason).items():
                set_committed_value(obj, key, value)
    return True
