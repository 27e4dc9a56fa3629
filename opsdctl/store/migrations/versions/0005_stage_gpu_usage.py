"""stage.gpu_peak_mib, stage.gpu_util_pct, stage.gpu: NVML figures of every stage.

Sampled by the worker on the stage's granted GPUs whatever the script: the most memory the
stage held on one GPU (by its own processes where NVML lists them, else the device's used
memory minus what it held at the start), the mean device utilisation, and the detail
{samples, attribution, interval_s, per_gpu}. NULL for stages without GPUs and older rows.

Revision ID: 0005_stage_gpu_usage
Revises: 0004_train_metrics
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_stage_gpu_usage"
down_revision = "0004_train_metrics"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("stage") as batch:
        batch.add_column(sa.Column("gpu_peak_mib", sa.Float(), nullable=True))
        batch.add_column(sa.Column("gpu_util_pct", sa.Float(), nullable=True))
        batch.add_column(sa.Column("gpu", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("stage") as batch:
        batch.drop_column("gpu")
        batch.drop_column("gpu_util_pct")
        batch.drop_column("gpu_peak_mib")
