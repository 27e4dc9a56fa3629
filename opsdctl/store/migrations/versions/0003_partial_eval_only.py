"""Partial and eval-only chains; the kind of a variant.

chain.eval_problems, chain.eval_k: a partial evaluation's problems x samples (`queue --partial
15x4`), NULL for the full protocol. chain.eval_only, chain.checkpoint, chain.trained_by: a chain
with no train stage that evaluates `checkpoint` ("base" = the base model), trained by chain
`trained_by` when opsdctl trained it (a plain id: a foreign key would make SQLite copy the
referenced chain table). variant.kind: "recipe" (every existing row), "checkpoint"
(trained outside opsdctl) or "base" (the base model).

Revision ID: 0003_partial_eval_only
Revises: 0002_chain_node
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_partial_eval_only"
down_revision = "0002_chain_node"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs (no batch copy): chain and variant are referenced by other tables, and a
    # copy-and-swap under SQLite's enforced foreign keys would fail.
    op.add_column("chain", sa.Column("eval_problems", sa.Integer(), nullable=True))
    op.add_column("chain", sa.Column("eval_k", sa.Integer(), nullable=True))
    op.add_column("chain", sa.Column("eval_only", sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column("chain", sa.Column("checkpoint", sa.String(), nullable=True))
    op.add_column("chain", sa.Column("trained_by", sa.Integer(), nullable=True))
    op.add_column("variant", sa.Column("kind", sa.String(), server_default="recipe", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("variant") as batch:
        batch.drop_column("kind")
    with op.batch_alter_table("chain") as batch:
        for col in ("trained_by", "checkpoint", "eval_only", "eval_k", "eval_problems"):
            batch.drop_column(col)
