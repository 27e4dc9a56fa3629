"""score.counts, score.problem_set: the per-problem counts in the compact form compare reads.

so that compare over a large store does not decode every run's per-problem JSON, these two columns hold
the correct counts ("7,12,0,...") and a key of the problem ids (models.compact_counts), filled
on every insert/update of a score. Existing rows are filled here from their `problems`.

Revision ID: 0006_score_counts
Revises: 0005_stage_gpu_usage
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0006_score_counts"
down_revision = "0005_stage_gpu_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    from opsdctl.store.models import compact_counts

    with op.batch_alter_table("score") as batch:
        batch.add_column(sa.Column("counts", sa.Text(), nullable=True))
        batch.add_column(sa.Column("problem_set", sa.String(), nullable=True))
    conn = op.get_bind()
    score = sa.table("score", sa.column("id", sa.Integer), sa.column("problems", sa.JSON),
                     sa.column("counts", sa.Text), sa.column("problem_set", sa.String))
    rows = conn.execute(sa.select(score.c.id, score.c.problems).where(score.c.problems.is_not(None))).all()
    for sid, problems in rows:
        if isinstance(problems, str):  # a JSON column read through a bare table may come back as text
            problems = json.loads(problems)
        counts, key = compact_counts(problems)
        if counts is not None:
            conn.execute(score.update().where(score.c.id == sid).values(counts=counts, problem_set=key))


def downgrade() -> None:
    with op.batch_alter_table("score") as batch:
        batch.drop_column("problem_set")
        batch.drop_column("counts")
