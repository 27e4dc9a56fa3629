"""Chain states: one enum, one table of allowed transitions, guarded updates.

A transition is a single `UPDATE chain SET state = new WHERE id = ? AND state = expected`,
so two processes racing (the worker finishing a stage, `opsdctl cancel` from a shell) can never
both win: the loser's UPDATE matches no row and it sees that it lost.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

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


# A stage row lives `running`, then takes its chain's terminal value, with one spelling of its
# own: the stage the planner stopped is `stopped` (its chain ends `stopped-futile`).
STAGE_STOPPED = "stopped"


def stage_value(state: State) -> str:
    """The stage row's spelling of `state` (the store's strings are unchanged)."""
    return STAGE_STOPPED if State(state) is State.STOPPED_FUTILE else State(state).value


@dataclass(frozen=True)
class Outcome:
    """How a stage or a chain ended: a terminal state that carries its reason and exit code
    (pueue's `TaskStatus::Done(result)`). The stage watcher makes one, the chain's loop and the
    salvage pass it on, and `transition` writes it: one value from the process to the store.

    `recorded`: the chain's row already holds its end (a cancel from a shell got there first, or
    the stage itself ended the chain with its score), so whoever gets it only reads the row back.
    `by_policy`: the gate stopped the stage (its row says `stopped`, whatever end its chain takes).
    """

    state: State
    reason: Optional[str] = None
    exit_code: Optional[int] = None
    checkpoint: Optional[str] = None  # a train stage that succeeded: what the eval stage reads
    recorded: bool = False
    by_policy: bool = False

    def __post_init__(self) -> None:
        if State(self.state) not in TERMINAL:
            raise IllegalTransition(f"an outcome must be a terminal state, not {self.state}")
        object.__setattr__(self, "state", State(self.state))

    @property
    def ok(self) -> bool:
        return self.state is State.SUCCEEDED

    @property
    def stage_value(self) -> str:
        return STAGE_STOPPED if self.by_policy else stage_value(self.state)


def transition(session, chain_id: int, expected, new: Union[State, Outcome], *, reason: str | None = None,
               **values) -> bool:
    """Move chain `chain_id` from one of `expected` to `new` in one guarded UPDATE. `new` may be
    an Outcome: its state, with its reason unless `reason` is given.

    Returns False (and changes nothing) when the chain is not in an expected state any more:
    someone else moved it first. Records the move in the transition table, and a chain's end in
    the [notify] outbox.
    """
    from sqlalchemy import select, update

    from opsdctl.store import outbox
    from opsdctl.store.models import Chain, Transition, utcnow
    from opsdctl.store.outbox import CHAIN_END_EVENTS

    if isinstance(new, Outcome):
        new, reason = new.state, reason if reason is not None else new.reason
    new = State(new)
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
