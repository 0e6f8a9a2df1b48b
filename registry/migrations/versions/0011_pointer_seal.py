"""Pin each gallery version's seal on the pointer rows that name it: ``seal_sha256``, the sha256 of the version's
``seal.json`` (components/indexing/seal.py) — what its switches check, recorded once when it was published (its
files' sizes and modification times, its manifests' sha256, the serving vectors' rows per generation).

A rollback to a version whose seal is the pinned file and still matches checks nothing that grows with its rows
(flows/backfill/rollback.py). Rows written before this revision keep NULL: a rollback to their version verifies it in
full, as before.

Revision ID: 0011_pointer_seal
Revises: 0010_nights
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_pointer_seal"
down_revision = "0010_nights"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.add_column(sa.Column("seal_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gallery_pointers") as batch:
        batch.drop_column("seal_sha256")
