"""train_stats.metrics: the user's declared training metrics.

`[stages.train.metrics]` name -> regex; per run {name: {"mean", "last", "steps"}} (the per-step
values live in train_stats.curve). NULL for runs recorded before, or without declared metrics.

Revision ID: 0004_train_metrics
Revises: 0003_partial_eval_only
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_train_metrics"
down_revision = "0003_partial_eval_only"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("train_stats") as batch:
        batch.add_column(sa.Column("metrics", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("train_stats") as batch:
        batch.drop_column("metrics")
