"""Pin the models by content: sha256 of each generation's checkpoint and of each live pointer's model.

A parent checkpoint replaced by other weights of the same shape is then refused before training
(flows/planning/plan.py). Rows written before this revision keep NULL and are checked by their spec only.

Revision ID: 0002_checkpoint_sha256
Revises: 0001_baseline
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_checkpoint_sha256"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("checkpoint_sha256", sa.String(length=64), nullable=True))
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.add_column(sa.Column("model_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.drop_column("model_sha256")
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("checkpoint_sha256")
