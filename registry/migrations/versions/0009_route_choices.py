"""Record which upgrade route a user's rule took for a generation: the ``route_choices`` table (docs/design.md §11).

A row names the generation, the earlier generation whose gallery the route starts from, the route taken
(``compatible`` | ``adapter`` | ``transform`` | ``backfill``), the rule that took it (``auto`` or the route the user
set), the bar (``upgrade.min_map``) and whether the route met it, the one line that says why, and every route's
measurement (served mAP, seconds per item, µs per query). A lineage before this revision has no route choices.

Revision ID: 0009_route_choices
Revises: 0008_bridges
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_route_choices"
down_revision = "0008_bridges"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "route_choices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("from_generation_id", sa.Integer(), nullable=False),
        sa.Column("route", sa.String(length=16), nullable=False),
        sa.Column("rule", sa.String(length=16), nullable=False),
        sa.Column("min_map", sa.Float(), nullable=True),
        sa.Column("met_bar", sa.Boolean(), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["generation_id"], ["generations.id"]),
        sa.ForeignKeyConstraint(["from_generation_id"], ["generations.id"]),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("route_choices")
