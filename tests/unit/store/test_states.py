"""Chain states: the transition table and the guarded transition."""

from __future__ import annotations

import pytest
from support.one_chain import store_with_one_chain

from opsdctl.store.states import (
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    State,
    check_transition,
    transition,
)


# --- states -------------------------------------------------------------------------------


def test_transition_table():
    assert set(TRANSITIONS) == set(State)
    assert TERMINAL == {State.SUCCEEDED, State.FAILED, State.CANCELLED, State.INTERRUPTED, State.SKIPPED,
                        State.STOPPED_FUTILE}
    assert TRANSITIONS[State.QUEUED] == {State.RUNNING, State.CANCELLED, State.SKIPPED}
    for s in TERMINAL:
        with pytest.raises(IllegalTransition):
            check_transition(s, State.QUEUED)
    with pytest.raises(IllegalTransition):
        check_transition(State.QUEUED, State.SUCCEEDED)


def test_guarded_transition(tmp_path):
    from opsdctl.store.models import Chain, Transition

    store = store_with_one_chain(tmp_path, "queued")
    with store.write() as s:
        assert transition(s, 1, State.QUEUED, State.RUNNING)
        assert not transition(s, 1, State.QUEUED, State.RUNNING)  # lost the race: no change
        assert transition(s, 1, [State.QUEUED, State.RUNNING], State.CANCELLED, reason="r")
    with store.read() as s:
        c = s.get(Chain, 1)
        assert (c.state, c.reason) == ("cancelled", "r") and c.finished_at is not None
        from sqlalchemy import select

        rows = s.scalars(select(Transition).order_by(Transition.id))
        assert [(t.from_state, t.to_state) for t in rows] == [
            ("queued", "running"), ("running", "cancelled")]
    with store.write() as s, pytest.raises(IllegalTransition):
        transition(s, 1, State.CANCELLED, State.RUNNING)
