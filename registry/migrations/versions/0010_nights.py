"""Record a lifecycle policy's nights: the ``nights`` table (docs/design.md §7.18).

A row is one night of the nightly run with ``lifecycle.policy`` set: the policy, the night's new generation (if
any), the live gallery's and production's generations it started from, the action taken with its fraction and
target, the one-line reason, the forecast served mAP and every option considered, the shipped rules' checks, its
state (decided → acting → done), its cost (items, worker-seconds), the backfill or bridge it made, the re-embedding it
carries over, and — recorded the night after — its outcome. A lineage before this revision has no nights.

Revision ID: 0010_nights
Revises: 0009_route_choices
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_nights"
down_revision = "0009_route_choices"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nights",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("night", sa.String(length=64), nullable=False),
        sa.Column("policy", sa.String(length=16), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=True),
        sa.Column("live_generation_id", sa.Integer(), nullable=False),
        sa.Column("production_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("fraction", sa.Float(), nullable=True),
        sa.Column("target_generation_id", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("forecast_map", sa.Float(), nullable=True),
        sa.Column("served_before", sa.Float(), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("checks", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("compute_s", sa.Float(), nullable=False),
        sa.Column("backfill_id", sa.Integer(), nullable=True),
        sa.Column("bridge_id", sa.Integer(), nullable=True),
        sa.Column("carry", sa.JSON(), nullable=True),
        sa.Column("outcome_map", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["generation_id"], ["generations.id"]),
        sa.ForeignKeyConstraint(["live_generation_id"], ["generations.id"]),
        sa.ForeignKeyConstraint(["production_id"], ["generations.id"]),
        sa.ForeignKeyConstraint(["target_generation_id"], ["generations.id"]),
        sa.ForeignKeyConstraint(["backfill_id"], ["backfill_events.id"]),
        sa.ForeignKeyConstraint(["bridge_id"], ["bridges.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("night"),
    )


def downgrade() -> None:
    op.drop_table("nights")
