"""Pin the live index by its manifest: the sha256 of the serving index's ``manifest.json`` on each pointer row.

The manifest records the sha256 of every index file, so pinning it pins the index; planning refuses a live index
whose manifest is not the pinned one (docs/design.md §7.8). Rows written before this revision keep NULL and are
checked by the manifest's own checksums only.

Revision ID: 0005_index_sha256
Revises: 0004_code_digest
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_index_sha256"
down_revision = "0004_code_digest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.add_column(sa.Column("index_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.drop_column("index_sha256")
