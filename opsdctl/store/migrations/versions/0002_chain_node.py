"""chain.node_id: the Ray node a chain's stages run on (NULL with the local executor).

Needed to stop a chain's orphaned stage processes on the right node after its Ray actor or the
worker died (recovery pins a small task to that node); `stage.host` names the machine for people,
but host names are not unique in a cluster of containers.

Revision ID: 0002_chain_node
Revises: 0001_initial
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_chain_node"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chain") as batch:
        batch.add_column(sa.Column("node_id", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chain") as batch:
        batch.drop_column("node_id")
