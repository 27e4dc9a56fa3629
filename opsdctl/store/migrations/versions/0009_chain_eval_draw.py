"""chain.eval_draw: which fresh draw of eval samples a chain's evaluation is.

0 for every chain's own evaluation (and for old rows); a re-evaluation of a scored checkpoint
(`opsdctl requeue CHAIN --reeval`, or the adaptive worker's auto-repeat) takes the next number,
and the evaluator draws its samples from a seed derived from it, so compare may average the
evaluations of one checkpoint as one run with more samples per problem.

Revision ID: 0009_chain_eval_draw
Revises: 0008_notify_outbox
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_chain_eval_draw"
down_revision = "0008_notify_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chain") as batch:
        batch.add_column(sa.Column("eval_draw", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("chain") as batch:
        batch.drop_column("eval_draw")
