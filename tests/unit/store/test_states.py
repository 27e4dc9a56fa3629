"""Chain states: the transition table and the guarded transition."""

from __future__ import annotations

import pytest

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
    from opsdctl.store.engine import open_store
    from opsdctl.store.models import Chain, Transition, Variant

    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    with store.write() as s:
        v = Variant(name="v", version=1, hash="h")
        s.add(v)
        s.flush()
        s.add(Chain(variant_id=v.id, state="queued"))
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
