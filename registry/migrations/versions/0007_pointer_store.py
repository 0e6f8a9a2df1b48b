"""Record where the live gallery's vectors live on each pointer row: the store (``gallery.store``: faiss, milvus,
lancedb …), its collection / table (NULL for FAISS files), the rows per generation stamp as written and the ANN
index's type and parameters.

``bctflow doctor`` compares the recorded rows per generation with what the store holds now
(flows/recovery/reconcile.py). Rows written before this revision keep NULL: where their vectors live is read from the
index's attachment only, and doctor has no recorded counts to compare.

Revision ID: 0007_pointer_store
Revises: 0006_gallery_sha256
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_pointer_store"
down_revision = "0006_gallery_sha256"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.add_column(sa.Column("store", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("collection", sa.String(length=256), nullable=True))
        batch.add_column(sa.Column("rows_by_generation", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("index_params", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.drop_column("index_params")
        batch.drop_column("rows_by_generation")
        batch.drop_column("collection")
        batch.drop_column("store")
