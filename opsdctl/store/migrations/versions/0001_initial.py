"""The store as opsdctl created it before migrations existed (SQLModel create_all).

A pre-migration runs.db is stamped with this revision as it is (its tables are exactly these),
then upgraded from here.

Revision ID: 0001_initial
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "code_snapshot",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("commit", sa.String(), nullable=True),
        sa.Column("head", sa.String(), nullable=True),
        sa.Column("dirty", sa.Boolean(), nullable=False),
        sa.Column("diffstat", sa.Text(), nullable=False),
        sa.Column("source_dir", sa.String(), nullable=False),
        sa.Column("prefix", sa.String(), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kind", "key", "prefix", name="uq_snapshot_kind_key"),
    )
    op.create_table(
        "meta",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "variant",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(), nullable=False),
        sa.Column("description", sa.String(), nullable=False),
        sa.Column("hparams", sa.JSON(), nullable=False),
        sa.Column("method", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version", name="uq_variant_name_version"),
    )
    op.create_index("ix_variant_hash", "variant", ["hash"])
    op.create_index("ix_variant_name", "variant", ["name"])
    op.create_table(
        "worker_run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("create_time", sa.Float(), nullable=True),
        sa.Column("started_at", UTC, nullable=False),
        sa.Column("heartbeat_at", UTC, nullable=False),
        sa.Column("stopped_at", UTC, nullable=True),
        sa.Column("exit_reason", sa.String(), nullable=True),
        sa.Column("activity", sa.String(), nullable=False),
        sa.Column("drain", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "chain",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.Integer(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("stage", sa.String(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("profile", sa.String(), nullable=False),
        sa.Column("snapshot_id", sa.Integer(), nullable=True),
        sa.Column("code_dir", sa.String(), nullable=False),
        sa.Column("requeued_from", sa.Integer(), nullable=True),
        sa.Column("worker_pid", sa.Integer(), nullable=True),
        sa.Column("worker_host", sa.String(), nullable=True),
        sa.Column("queued_at", UTC, nullable=False),
        sa.Column("started_at", UTC, nullable=True),
        sa.Column("finished_at", UTC, nullable=True),
        sa.ForeignKeyConstraint(["requeued_from"], ["chain.id"]),
        sa.ForeignKeyConstraint(["snapshot_id"], ["code_snapshot.id"]),
        sa.ForeignKeyConstraint(["variant_id"], ["variant.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_chain_state", "chain", ["state"])
    op.create_index("ix_chain_variant_id", "chain", ["variant_id"])
    op.create_table(
        "score",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("avg_at_k", sa.Float(), nullable=False),
        sa.Column("n_problems", sa.Integer(), nullable=False),
        sa.Column("n_correct", sa.Integer(), nullable=True),
        sa.Column("n_samples", sa.Integer(), nullable=True),
        sa.Column("problems", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("partial", sa.Boolean(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.ForeignKeyConstraint(["chain_id"], ["chain.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_score_chain_id", "score", ["chain_id"], unique=True)
    op.create_table(
        "stage",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("cwd", sa.String(), nullable=False),
        sa.Column("token", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("pgid", sa.Integer(), nullable=True),
        sa.Column("create_time", sa.Float(), nullable=True),
        sa.Column("gpus", sa.String(), nullable=False),
        sa.Column("log_path", sa.String(), nullable=False),
        sa.Column("stage_dir", sa.String(), nullable=False),
        sa.Column("checkpoint", sa.String(), nullable=True),
        sa.Column("started_at", UTC, nullable=False),
        sa.Column("finished_at", UTC, nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("estimate_seconds", sa.Float(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("progress", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("pids", sa.JSON(none_as_null=True), nullable=True),
        sa.ForeignKeyConstraint(["chain_id"], ["chain.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("chain_id", "name", name="uq_stage_chain_name"),
    )
    op.create_index("ix_stage_chain_id", "stage", ["chain_id"])
    op.create_table(
        "train_stats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.Integer(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=True),
        sa.Column("final_loss", sa.Float(), nullable=True),
        sa.Column("mean_kl", sa.Float(), nullable=True),
        sa.Column("frac_clipped", sa.Float(), nullable=True),
        sa.Column("step_seconds", sa.Float(), nullable=True),
        sa.Column("rollout_seconds", sa.Float(), nullable=True),
        sa.Column("peak_mem_mib", sa.Float(), nullable=True),
        sa.Column("train_runtime", sa.Float(), nullable=True),
        sa.Column("curve", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("source", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["chain_id"], ["chain.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_train_stats_chain_id", "train_stats", ["chain_id"], unique=True)
    op.create_table(
        "transition",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.Integer(), nullable=False),
        sa.Column("at", UTC, nullable=False),
        sa.Column("from_state", sa.String(), nullable=False),
        sa.Column("to_state", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(["chain_id"], ["chain.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_transition_chain_id", "transition", ["chain_id"])


def downgrade() -> None:
    for table in ("transition", "train_stats", "stage", "score", "chain", "worker_run", "variant", "meta",
                  "code_snapshot"):
        op.drop_table(table)
