"""A chain the worker interrupted (its worker died or stopped), and its fresh queued copy
(opsdctl.store.chain_rows.copy, as `requeue` makes of a finished chain) pointing at the old row."""

from __future__ import annotations

from typing import Optional

from opsdctl.store import chain_rows
from opsdctl.store.engine import get_chain
from opsdctl.store.models import Chain
from opsdctl.store.states import State, transition


def interrupt_and_requeue(session, chain: Chain, reason: str, requeue: bool) -> Optional[Chain]:
    """running -> interrupted (guarded); optionally a fresh queued copy pointing at it."""
    if not transition(session, chain.id, State.RUNNING, State.INTERRUPTED, reason=reason):
        return None
    if not requeue:
        return None
    fresh = get_chain(session, chain.id)
    return chain_rows.copy(session, fresh)
