"""Pin each evaluation gallery by content: the sha256 of its part store's ``store.json`` (which lists every part's
sha256) on each generation row (its own gallery) and each live pointer row (the live version's gallery).

Planning then refuses an evaluation gallery that was replaced or damaged before anything trains
(flows/planning/past.py). Rows written before this revision keep NULL and are checked by the parts' own digests
in ``store.json`` only.

Revision ID: 0006_gallery_sha256
Revises: 0005_index_sha256
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_gallery_sha256"
down_revision = "0005_index_sha256"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("gallery_sha256", sa.String(length=64), nullable=True))
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.add_column(sa.Column("gallery_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.drop_column("gallery_sha256")
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("gallery_sha256")
