"""outbox: events for the [notify] hooks, written in the same transaction as the change they report.

A chain's end, a stall, a verdict change, an auto-export and a nearly spent budget each add one row
(unique on `key`, the event's own name); the worker delivers the rows whose `sent_at` is NULL and
sets it, so a worker that dies leaves its undelivered events to the next one.

Revision ID: 0008_notify_outbox
Revises: 0007_chain_stage_spec
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_notify_outbox"
down_revision = "0007_chain_stage_spec"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("sent_at", UTC, nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.UniqueConstraint("key", name="uq_outbox_key"),
    )
    op.create_index("ix_outbox_sent_at", "outbox", ["sent_at"])


def downgrade() -> None:
    op.drop_index("ix_outbox_sent_at", table_name="outbox")
    op.drop_table("outbox")
