"""The [notify] outbox: an event is a row written in the same transaction as the change it
reports, so it exists exactly when the change does; delivering it is opsdctl.run.notify's job.

`key` is the event's own name ("chain:7:failed", "stalled:12:<since>"): recording the same event
again (a second look at the same stall, a retried transaction) keeps the one row.
"""

from __future__ import annotations

import enum
from typing import Optional


class EventKind(str, enum.Enum):
    CHAIN_SUCCEEDED = "chain.succeeded"
    CHAIN_FAILED = "chain.failed"
    CHAIN_CANCELLED = "chain.cancelled"
    CHAIN_INTERRUPTED = "chain.interrupted"
    STAGE_STALLED = "stage.stalled"
    VERDICT_CHANGED = "verdict.changed"
    EXPORT_WRITTEN = "export.written"
    BUDGET_NEARLY_SPENT = "budget.nearly_spent"

    def __str__(self) -> str:
        return self.value


# The chain ends a hook hears about (skipped and stopped-futile chains are the planner's own moves).
CHAIN_END_EVENTS = {
    "succeeded": EventKind.CHAIN_SUCCEEDED,
    "failed": EventKind.CHAIN_FAILED,
    "cancelled": EventKind.CHAIN_CANCELLED,
    "interrupted": EventKind.CHAIN_INTERRUPTED,
}


def record(session, kind: EventKind, key: str, payload: dict) -> bool:
    """Add the event unless one with `key` exists; True when added. Call it inside the write
    transaction that makes the change, never apart from it."""
    from sqlalchemy import select

    from opsdctl.store.models import Outbox

    if session.scalar(select(Outbox.id).where(Outbox.key == key)) is not None:
        return False
    session.add(Outbox(key=key, kind=kind.value, payload=payload))
    return True


def pending(session, limit: int = 100) -> list:
    """Undelivered events, oldest first."""
    from sqlalchemy import select

    from opsdctl.store.models import Outbox

    return list(session.scalars(select(Outbox).where(Outbox.sent_at.is_(None)).order_by(Outbox.id).limit(limit)))


def mark_sent(session, event_id: int, error: Optional[str]) -> None:
    from opsdctl.store.models import Outbox, utcnow

    row = session.get(Outbox, event_id)
    row.sent_at = utcnow()
    row.error = error
