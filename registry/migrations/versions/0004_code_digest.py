"""Record the code that shaped each generation: the digest of the model-shaping source files.

The nightly check retrains when it differs from the newest generation's (components/code_digest.py,
docs/design.md §7.14). Rows written before this revision keep NULL: their code is unknown, and the
check does not retrain for that alone.

Revision ID: 0004_code_digest
Revises: 0003_relative_paths
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_code_digest"
down_revision = "0003_relative_paths"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.add_column(sa.Column("code_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generations") as batch:
        batch.drop_column("code_digest")
