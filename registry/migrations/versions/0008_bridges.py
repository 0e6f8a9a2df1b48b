"""Record the fitted maps between generations' spaces: the ``bridges`` table (docs/design.md §11).

A bridge row names its two generations, its role (``adapter``: a new generation's queries into its parent's space;
``transform``: stored vectors of an old generation into a new one's), the map's kind, its version (the fits of one
(from, to, role), counted from 1), its file and that file's sha256, the paired sample size, the held-out fit error
and, once registered, its MLflow model version. A lineage before this revision has no bridges.

Revision ID: 0008_bridges
Revises: 0007_pointer_store
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_bridges"
down_revision = "0007_pointer_store"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bridges",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("from_generation_id", sa.Integer(), nullable=False),
        sa.Column("to_generation_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("sample", sa.Integer(), nullable=False),
        sa.Column("fit_error", sa.Float(), nullable=False),
        sa.Column("mlflow_version", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["from_generation_id"], ["generations.id"]),
        sa.ForeignKeyConstraint(["to_generation_id"], ["generations.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("from_generation_id", "to_generation_id", "role", "version"),
    )


def downgrade() -> None:
    op.drop_table("bridges")
