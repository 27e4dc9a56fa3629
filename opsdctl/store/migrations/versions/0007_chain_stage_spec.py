"""chain.stage_spec / chain.commands_hash: stage settings frozen at queue time; stage.recipe_check.

A chain records the train/eval command templates, checkpoint template, recipe_env_path and
expect patterns of opsdctl.toml when it is queued (so later edits change only later chains),
and the sha256 of what decides what runs (compare's code identity). stage.recipe_check holds
what the train log showed of the recipe (the effective-config check). All NULL for old rows.

Revision ID: 0007_chain_stage_spec
Revises: 0006_score_counts
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_chain_stage_spec"
down_revision = "0006_score_counts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chain") as batch:
        batch.add_column(sa.Column("stage_spec", sa.JSON(none_as_null=True), nullable=True))
        batch.add_column(sa.Column("commands_hash", sa.String(), nullable=True))
    with op.batch_alter_table("stage") as batch:
        batch.add_column(sa.Column("recipe_check", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("stage") as batch:
        batch.drop_column("recipe_check")
    with op.batch_alter_table("chain") as batch:
        batch.drop_column("commands_hash")
        batch.drop_column("stage_spec")
