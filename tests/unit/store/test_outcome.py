"""The one status type: every terminal Outcome maps to its store strings and back, and the
transition table still refuses what it refused."""

from __future__ import annotations

import pytest
from support.one_chain import store_with_one_chain

from opsdctl.store.states import (ACTIVE, STAGE_STOPPED, TERMINAL, IllegalTransition, Outcome, State,
                                  check_transition, stage_value)

# The store's strings, as migrations and --json know them: chains and stage rows.
CHAIN_VALUES = {State.SUCCEEDED: "succeeded", State.FAILED: "failed", State.CANCELLED: "cancelled",
                State.INTERRUPTED: "interrupted", State.SKIPPED: "skipped", State.STOPPED_FUTILE: "stopped-futile"}
STAGE_VALUES = {State.SUCCEEDED: "succeeded", State.FAILED: "failed", State.CANCELLED: "cancelled",
                State.INTERRUPTED: "interrupted", State.SKIPPED: "skipped", State.STOPPED_FUTILE: "stopped"}


def test_the_terminal_states_are_exactly_the_outcomes():
    assert TERMINAL == set(CHAIN_VALUES)
    assert ACTIVE == {State.QUEUED, State.RUNNING}


@pytest.mark.parametrize("state", sorted(CHAIN_VALUES, key=lambda s: s.value))
def test_every_outcome_maps_to_its_store_values_and_back(state):
    outcome = Outcome(state, "why", exit_code=3)
    assert outcome.state.value == CHAIN_VALUES[state] and State(CHAIN_VALUES[state]) is state
    assert outcome.stage_value == STAGE_VALUES[state] == stage_value(state)
    assert Outcome(state.value).state is state  # a store string in, the enum out
    assert outcome.ok is (state is State.SUCCEEDED)
    assert (outcome.reason, outcome.exit_code, outcome.recorded) == ("why", 3, False)


def test_a_policy_stop_is_a_stopped_stage_whatever_end_its_chain_takes():
    assert Outcome(State.FAILED, "futile", by_policy=True).stage_value == STAGE_STOPPED
    assert Outcome(State.STOPPED_FUTILE, "futile").stage_value == STAGE_STOPPED


@pytest.mark.parametrize("state", [State.QUEUED, State.RUNNING, "running"])
def test_an_outcome_is_terminal(state):
    with pytest.raises(IllegalTransition):
        Outcome(state)


def test_an_outcome_is_frozen():
    with pytest.raises(AttributeError):
        Outcome(State.FAILED).state = State.SUCCEEDED


@pytest.mark.parametrize("old", sorted(TERMINAL, key=lambda s: s.value))
def test_no_move_leaves_an_outcome(old):
    for new in State:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)


def test_the_moves_into_outcomes_are_unchanged():
    assert {s for s in State if _allowed(State.QUEUED, s)} == {State.RUNNING, State.CANCELLED, State.SKIPPED}
    assert {s for s in State if _allowed(State.RUNNING, s)} == TERMINAL
    with pytest.raises(IllegalTransition):
        check_transition(State.QUEUED, State.SUCCEEDED)


def _allowed(old, new) -> bool:
    try:
        check_transition(old, new)
    except IllegalTransition:
        return False
    return True


def test_the_store_transition_writes_an_outcome(tmp_path):
    from opsdctl.store.models import Chain
    from opsdctl.store.states import transition

    store = store_with_one_chain(tmp_path, "running")
    with store.write() as s:
        assert transition(s, 1, State.RUNNING, Outcome(State.STOPPED_FUTILE, "futile at k=4"))
        assert not transition(s, 1, State.RUNNING, Outcome(State.FAILED, "late"))  # lost: no change
    with store.read() as s:
        c = s.get(Chain, 1)
        assert (c.state, c.reason) == ("stopped-futile", "futile at k=4") and c.finished_at is not None
    with store.write() as s, pytest.raises(IllegalTransition):
        transition(s, 1, State.STOPPED_FUTILE, Outcome(State.FAILED))
