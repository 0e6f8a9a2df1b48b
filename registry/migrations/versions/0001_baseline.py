"""Baseline: the lineage schema as bctflow wrote it before Alembic (its ``schema_info`` v3).

Frozen here on purpose — later revisions change the schema step by step; this file never
follows the ORM models. Databases written before Alembic (``schema_info`` v1–v3, no
``alembic_version``) are brought to v3 by ``bctflow db-upgrade`` and stamped with this revision
(:mod:`registry.schema_version`).

Revision ID: 0001_baseline
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "generations",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("dataset", sa.String(length=64), nullable=False),
        sa.Column("data_hash", sa.String(length=64), nullable=False),
        sa.Column("data_snapshot", sa.String(length=512), nullable=False),
        sa.Column("class_order", sa.JSON(), nullable=False),
        sa.Column("architecture", sa.JSON(), nullable=False),
        sa.Column("geometry", sa.String(length=16), nullable=False),
        sa.Column("alignment", sa.String(length=64), nullable=False),
        sa.Column("hyperparameters", sa.JSON(), nullable=False),
        sa.Column("zeta", sa.Float(), nullable=True),
        sa.Column("curvature", sa.Float(), nullable=False),
        sa.Column("embed_dim", sa.Integer(), nullable=False),
        sa.Column("checkpoint_path", sa.String(length=1024), nullable=False),
        sa.Column("index_path", sa.String(length=1024), nullable=False),
        sa.Column("reference_checkpoint_path", sa.String(length=1024), nullable=True),
        sa.Column("params_digest", sa.String(length=64), nullable=False),
        sa.Column("data_fingerprint", sa.String(length=256), nullable=True),
        sa.Column("promoted", sa.Boolean(), nullable=True),
        sa.Column("mlflow_model", sa.String(length=256), nullable=True),
        sa.Column("mlflow_version", sa.String(length=32), nullable=True),
        sa.Column("mlflow_run_id", sa.String(length=64), nullable=True),
        sa.Column("train_seconds", sa.Float(), nullable=True),
        sa.Column("compatible_with_live", sa.Boolean(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "schema_info",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "backfill_decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("against_generation_id", sa.Integer(), nullable=True),
        sa.Column("required", sa.Boolean(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("checks", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["against_generation_id"],
            ["generations.id"],
        ),
        sa.ForeignKeyConstraint(
            ["generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("generation_id"),
    )
    op.create_table(
        "backfill_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("from_generation_id", sa.Integer(), nullable=False),
        sa.Column("to_generation_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("fraction", sa.Float(), nullable=False),
        sa.Column("order", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("reembedded", sa.Integer(), nullable=False),
        sa.Column("index_path", sa.String(length=1024), nullable=False),
        sa.Column("zeta_restarted", sa.Boolean(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["from_generation_id"],
            ["generations.id"],
        ),
        sa.ForeignKeyConstraint(
            ["to_generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "compat_summaries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("as_of_generation_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("generation_ids", sa.JSON(), nullable=False),
        sa.Column("matrix", sa.JSON(), nullable=False),
        sa.Column("ac", sa.Float(), nullable=True),
        sa.Column("aa", sa.Float(), nullable=True),
        sa.Column("aca", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["as_of_generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("as_of_generation_id", "metric"),
    )
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("query_generation_id", sa.Integer(), nullable=False),
        sa.Column("query_role", sa.String(length=16), nullable=False),
        sa.Column("gallery_generation_id", sa.Integer(), nullable=False),
        sa.Column("gallery_role", sa.String(length=16), nullable=False),
        sa.Column("metric", sa.String(length=32), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["gallery_generation_id"],
            ["generations.id"],
        ),
        sa.ForeignKeyConstraint(
            ["query_generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("query_generation_id", "query_role", "gallery_generation_id", "metric"),
    )
    op.create_table(
        "generation_metrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("generation_id", "kind", "name"),
    )
    op.create_table(
        "promotions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("previous_generation_id", sa.Integer(), nullable=True),
        sa.Column("forced", sa.Boolean(), nullable=False),
        sa.Column("by", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.String(length=1024), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["generation_id"],
            ["generations.id"],
        ),
        sa.ForeignKeyConstraint(
            ["previous_generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "zeta_steps",
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("parent_zeta", sa.Float(), nullable=True),
        sa.Column("delta", sa.Float(), nullable=False),
        sa.Column("zeta", sa.Float(), nullable=False),
        sa.Column("restarted", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("generation_id"),
    )
    op.create_table(
        "gallery_pointers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation_id", sa.Integer(), nullable=False),
        sa.Column("index_path", sa.String(length=1024), nullable=False),
        sa.Column("reason", sa.String(length=256), nullable=False),
        sa.Column("switched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model_checkpoint", sa.String(length=1024), nullable=True),
        sa.Column("zeta", sa.Float(), nullable=True),
        sa.Column("compatible_generations", sa.JSON(), nullable=True),
        sa.Column("backfill_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["backfill_id"],
            ["backfill_events.id"],
        ),
        sa.ForeignKeyConstraint(
            ["generation_id"],
            ["generations.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(
        sa.table("schema_info", sa.column("id", sa.Integer), sa.column("version", sa.Integer)),
        [{"id": 1, "version": 3}],
    )


def downgrade() -> None:
    op.drop_table("gallery_pointers")
    op.drop_table("zeta_steps")
    op.drop_table("promotions")
    op.drop_table("generation_metrics")
    op.drop_table("evaluations")
    op.drop_table("compat_summaries")
    op.drop_table("backfill_events")
    op.drop_table("backfill_decisions")
    op.drop_table("schema_info")
    op.drop_table("generations")
