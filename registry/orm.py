"""Lineage database schema (SQLAlchemy 2 ORM). Any SQLAlchemy URL works; SQLite by default.

Tables
* ``generations``        one row per model generation (docs/design.md §7)
* ``evaluations``        M(φ_q, φ_g) per (query generation/role, gallery generation, metric)
* ``generation_metrics`` derived numbers (P_com, P_up, denominators) and health diagnostics
* ``zeta_steps``         the ζ lineage: parent ζ, Δζ, ζ, restarts
* ``backfill_decisions`` the decision per generation, with reasons and every rule's check
* ``gallery_pointers``   which generation's index serves the live gallery (latest row wins)
* ``backfill_events``    every backfill: from/to generation, full or partial, counts, duration
* ``promotions``         which generation the `production` alias pointed to, when, by whom, forced or not
* ``compat_summaries``   the compatibility matrix over serving generations after each generation, AC/AA/ACA
* ``bridges``            fitted maps between generations' spaces (query adapters, gallery transforms)
* ``route_choices``      the upgrade route a rule took for a generation, with every route's measurement
* ``nights``             a lifecycle policy's night: its decision, the action carried out, its forecast and outcome

Schema changes are Alembic revisions in ``registry/migrations/versions/`` (:mod:`registry.schema_version`
runs them); a new database is built by the migrations. :func:`upgrade_schema` is only the bridge
for databases written before Alembic (``schema_info`` v1–v3): it adds missing tables and nullable
columns before the baseline revision is stamped. Only ``bctflow db-upgrade`` migrates: opening a
store never alters its schema.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

__all__ = [
    "SCHEMA_VERSION",
    "BackfillDecision",
    "BackfillEvent",
    "Base",
    "ChosenRoute",
    "CompatSummary",
    "Evaluation",
    "FittedBridge",
    "GalleryPointer",
    "Generation",
    "GenerationMetric",
    "Night",
    "Promotion",
    "ZetaStep",
    "upgrade_schema",
    "utcnow",
]

#: the last pre-Alembic ``schema_info`` version (v2: pointers carry model, ζ, accepted query generations, backfill;
#: v3: generations.compatible_with_live) — the Alembic baseline revision is this schema
SCHEMA_VERSION = 3


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Generation(Base):
    __tablename__ = "generations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("generations.id"), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="serving")  # serving | retired
    dataset: Mapped[str] = mapped_column(String(64))
    data_hash: Mapped[str] = mapped_column(String(64))
    data_snapshot: Mapped[str] = mapped_column(String(512))
    class_order: Mapped[list[Any]] = mapped_column(JSON)
    architecture: Mapped[dict[str, Any]] = mapped_column(JSON)
    geometry: Mapped[str] = mapped_column(String(16))
    alignment: Mapped[str] = mapped_column(String(64))
    hyperparameters: Mapped[dict[str, Any]] = mapped_column(JSON)
    zeta: Mapped[float | None] = mapped_column(Float, nullable=True)
    curvature: Mapped[float] = mapped_column(Float)
    embed_dim: Mapped[int] = mapped_column(Integer)
    checkpoint_path: Mapped[str] = mapped_column(String(1024))
    index_path: Mapped[str] = mapped_column(String(1024))
    reference_checkpoint_path: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    params_digest: Mapped[str] = mapped_column(String(64))
    data_fingerprint: Mapped[str | None] = mapped_column(String(256), nullable=True)
    promoted: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    mlflow_model: Mapped[str | None] = mapped_column(String(256), nullable=True)
    mlflow_version: Mapped[str | None] = mapped_column(String(32), nullable=True)
    mlflow_run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    train_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: the empirical compatibility criterion against the live gallery, measured whatever the rules (docs/design.md §7.3)
    compatible_with_live: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    #: sha256 of the final model.pt (revision 0002; None for rows written before it)
    checkpoint_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: sha256 of the code that shapes a model (components/code_digest.py; revision 0004; None for rows written before)
    code_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: sha256 of its evaluation gallery's store.json, which lists every part's sha256 (revision 0006; None before it)
    gallery_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    parent: Mapped[Generation | None] = relationship(remote_side=[id])
    metrics: Mapped[list[GenerationMetric]] = relationship(back_populates="generation", cascade="all, delete-orphan")
    decision: Mapped[BackfillDecision | None] = relationship(
        back_populates="generation", cascade="all, delete-orphan", foreign_keys="BackfillDecision.generation_id"
    )
    zeta_step: Mapped[ZetaStep | None] = relationship(back_populates="generation", cascade="all, delete-orphan")


class Evaluation(Base):
    __tablename__ = "evaluations"
    __table_args__ = (UniqueConstraint("query_generation_id", "query_role", "gallery_generation_id", "metric"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    query_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    #: "model" (the generation itself) or "reference" (its independently trained twin φ*)
    query_role: Mapped[str] = mapped_column(String(16), default="model")
    gallery_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    #: "model" or "reference" (the reference's own gallery, for M(φ*, φ*))
    gallery_role: Mapped[str] = mapped_column(String(16), default="model")
    metric: Mapped[str] = mapped_column(String(32))
    value: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class GenerationMetric(Base):
    __tablename__ = "generation_metrics"
    __table_args__ = (UniqueConstraint("generation_id", "kind", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    kind: Mapped[str] = mapped_column(String(16))  # "derived" | "diagnostic"
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float | None] = mapped_column(Float, nullable=True)

    generation: Mapped[Generation] = relationship(back_populates="metrics")


class ZetaStep(Base):
    __tablename__ = "zeta_steps"

    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"), primary_key=True)
    parent_zeta: Mapped[float | None] = mapped_column(Float, nullable=True)
    delta: Mapped[float] = mapped_column(Float)
    zeta: Mapped[float] = mapped_column(Float)
    restarted: Mapped[bool] = mapped_column(Boolean, default=False)

    generation: Mapped[Generation] = relationship(back_populates="zeta_step")


class BackfillDecision(Base):
    __tablename__ = "backfill_decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"), unique=True)
    against_generation_id: Mapped[int | None] = mapped_column(ForeignKey("generations.id"), nullable=True)
    required: Mapped[bool] = mapped_column(Boolean)
    reasons: Mapped[list[Any]] = mapped_column(JSON)
    checks: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    generation: Mapped[Generation] = relationship(back_populates="decision", foreign_keys=[generation_id])


class GalleryPointer(Base):
    __tablename__ = "gallery_pointers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    index_path: Mapped[str] = mapped_column(String(1024))
    reason: Mapped[str] = mapped_column(String(256))
    switched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    #: the model whose embeddings fill the gallery (a rescaled copy after a ζ restart)
    model_checkpoint: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    zeta: Mapped[float | None] = mapped_column(Float, nullable=True)
    compatible_generations: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    backfill_id: Mapped[int | None] = mapped_column(ForeignKey("backfill_events.id"), nullable=True)
    #: sha256 of model_checkpoint (revision 0002; None for rows written before it)
    model_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: sha256 of the index's manifest.json, which holds every index file's sha256 (revision 0005; None before it)
    index_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: sha256 of the version's evaluation gallery store.json, which lists every part's sha256 (revision 0006; None
    #: before it)
    gallery_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    #: where the serving vectors live (revision 0007; None before it): the store (params gallery.store: faiss, milvus,
    #: lancedb …), its collection / table (None for FAISS files), rows per generation stamp as written
    #: ({"<generation>": rows}) and the ANN index ({"index_type": …, its parameters})
    store: Mapped[str | None] = mapped_column(String(32), nullable=True)
    collection: Mapped[str | None] = mapped_column(String(256), nullable=True)
    rows_by_generation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    index_params: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: sha256 of the gallery version's seal.json, what its switches check (revision 0011; None before it: a rollback to
    #: the version verifies it in full)
    seal_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)


class BackfillEvent(Base):
    __tablename__ = "backfill_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    from_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    to_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    kind: Mapped[str] = mapped_column(String(16))  # full | partial
    fraction: Mapped[float] = mapped_column(Float)
    order: Mapped[str] = mapped_column(String(16))
    total: Mapped[int] = mapped_column(Integer)
    reembedded: Mapped[int] = mapped_column(Integer)
    index_path: Mapped[str] = mapped_column(String(1024))
    zeta_restarted: Mapped[bool] = mapped_column(Boolean, default=False)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    duration_s: Mapped[float] = mapped_column(Float)


class Promotion(Base):
    __tablename__ = "promotions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    previous_generation_id: Mapped[int | None] = mapped_column(ForeignKey("generations.id"), nullable=True)
    forced: Mapped[bool] = mapped_column(Boolean, default=False)
    by: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(String(1024))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CompatSummary(Base):
    __tablename__ = "compat_summaries"
    __table_args__ = (UniqueConstraint("as_of_generation_id", "metric"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    as_of_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    metric: Mapped[str] = mapped_column(String(32))
    generation_ids: Mapped[list[Any]] = mapped_column(JSON)
    matrix: Mapped[list[Any]] = mapped_column(JSON)
    ac: Mapped[float | None] = mapped_column(Float, nullable=True)
    aa: Mapped[float | None] = mapped_column(Float, nullable=True)
    aca: Mapped[float | None] = mapped_column(Float, nullable=True)


class FittedBridge(Base):
    """A fitted map between two generations' spaces (revision 0008; docs/design.md §11): ``role`` ``adapter`` (a
    query map from a new generation into its parent's space) or ``transform`` (a map of stored vectors from an old
    generation into a new one's); ``version`` counts the fits of one (from, to, role), the newest serves; its file
    (``path``, ``.npz``) pinned by ``sha256``; the paired ``sample`` it was fitted on and its held-out ``fit_error``;
    its MLflow model version once registered."""

    __tablename__ = "bridges"
    __table_args__ = (UniqueConstraint("from_generation_id", "to_generation_id", "role", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    from_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    to_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    role: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(1024))
    sha256: Mapped[str] = mapped_column(String(64))
    sample: Mapped[int] = mapped_column(Integer)
    fit_error: Mapped[float] = mapped_column(Float)
    mlflow_version: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ChosenRoute(Base):
    """The upgrade route a rule took for a generation (revision 0009; docs/design.md §11): from the gallery of
    ``from_generation_id``, ``route`` (compatible | adapter | transform | backfill) by ``rule`` (``auto`` or the route
    the user set) at the bar ``min_map``, whether it ``met_bar``, the one ``line`` that says why, and ``evidence``:
    every route's ``{"route", "served_map", "seconds_per_item", "query_us"}``."""

    __tablename__ = "route_choices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    from_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    route: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str] = mapped_column(String(16))
    min_map: Mapped[float | None] = mapped_column(Float, nullable=True)
    met_bar: Mapped[bool] = mapped_column(Boolean)
    line: Mapped[str] = mapped_column(Text)
    evidence: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Night(Base):
    """A night of the lifecycle (revision 0010; docs/design.md §7.18): the ``policy`` that decided it, the night's
    new generation (None: nothing was trained), the live gallery's and production's generations it started from,
    the ``action`` taken (keep | promote | adapter | transform | partial | full | continue) with its ``fraction`` and
    ``target_generation_id``, the one-line ``reason``, its ``forecast_map`` and every ``options`` considered (action,
    forecast, cost), the shipped rules' ``checks``; its ``state`` (``decided`` → ``acting`` → ``done``: a night found
    ``acting`` finishes its action, never decides again), what it cost (``items`` re-embedded or carried,
    ``compute_s`` worker-seconds: training, embedding, fitting), the backfill or bridge it made, the re-embedding it
    ``carry``-es over; and, recorded the night after, its ``outcome_map``: the served mAP@R the action gave."""

    __tablename__ = "nights"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    night: Mapped[str] = mapped_column(String(64), unique=True)
    policy: Mapped[str] = mapped_column(String(16))
    generation_id: Mapped[int | None] = mapped_column(ForeignKey("generations.id"), nullable=True)
    live_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    production_id: Mapped[int | None] = mapped_column(ForeignKey("generations.id"), nullable=True)
    action: Mapped[str] = mapped_column(String(16))
    fraction: Mapped[float | None] = mapped_column(Float, nullable=True)
    target_generation_id: Mapped[int | None] = mapped_column(ForeignKey("generations.id"), nullable=True)
    reason: Mapped[str] = mapped_column(Text)
    forecast_map: Mapped[float | None] = mapped_column(Float, nullable=True)
    served_before: Mapped[float | None] = mapped_column(Float, nullable=True)
    options: Mapped[list[Any]] = mapped_column(JSON)
    checks: Mapped[list[Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    items: Mapped[int] = mapped_column(Integer, default=0)
    compute_s: Mapped[float] = mapped_column(Float, default=0.0)
    backfill_id: Mapped[int | None] = mapped_column(ForeignKey("backfill_events.id"), nullable=True)
    bridge_id: Mapped[int | None] = mapped_column(ForeignKey("bridges.id"), nullable=True)
    carry: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    outcome_map: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class SchemaInfo(Base):
    __tablename__ = "schema_info"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)


def upgrade_schema(engine: Any, metadata: Any = None) -> list[str]:
    """Create missing tables and add missing *nullable* columns of ``metadata`` (default: these models). Returns
    what was added. The pre-Alembic bridge passes the baseline revision's tables (:mod:`registry.schema_version`)."""
    from sqlalchemy import inspect, text

    metadata = Base.metadata if metadata is None else metadata
    metadata.create_all(engine)
    added = []
    insp = inspect(engine)
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            have = {c["name"] for c in insp.get_columns(table.name)}
            for col in table.columns:
                if col.name not in have and col.nullable:
                    conn.execute(
                        text(f"ALTER TABLE {table.name} ADD COLUMN {col.name} {col.type.compile(engine.dialect)}")
                    )
                    added.append(f"{table.name}.{col.name}")
    return added
