"""The lineage store: every write of a generation is one transaction.

``commit_generation`` inserts the generation, its evaluations, derived metrics
and diagnostics, its ζ step, its backfill decision and (for generation 0) the
live-gallery pointer, all or nothing. A ``before_commit`` hook runs inside the
transaction (used to move staged artifacts into place), so a failure anywhere
leaves the database as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from components.errors import LineageError
from registry.db import (
    SCHEMA_VERSION,
    BackfillDecision,
    BackfillEvent,
    CompatSummary,
    Evaluation,
    GalleryPointer,
    Generation,
    GenerationMetric,
    Promotion,
    SchemaInfo,
    ZetaStep,
    upgrade_schema,
)

__all__ = [
    "RETRIEVAL_METRICS",
    "BackfillRecord",
    "CompatRecord",
    "DecisionRecord",
    "EvaluationRecord",
    "GenerationBundle",
    "GenerationRecord",
    "LineageStore",
    "PointerRecord",
    "ZetaRecord",
]

RETRIEVAL_METRICS = ("cmc@1", "cmc@5", "map")
DERIVED_METRICS = ("cmc@1", "map")


@dataclass
class GenerationRecord:
    id: int
    name: str
    parent_id: int | None
    dataset: str
    data_hash: str
    data_snapshot: str
    class_order: list[int]
    architecture: dict[str, Any]
    geometry: str
    alignment: str
    hyperparameters: dict[str, Any]
    zeta: float | None
    curvature: float
    embed_dim: int
    checkpoint_path: str
    index_path: str
    params_digest: str
    reference_checkpoint_path: str | None = None
    train_seconds: float | None = None
    data_fingerprint: str | None = None
    promoted: bool | None = None
    mlflow_model: str | None = None
    mlflow_version: str | None = None
    mlflow_run_id: str | None = None


@dataclass
class EvaluationRecord:
    query_generation_id: int
    gallery_generation_id: int
    metric: str
    value: float
    query_role: str = "model"
    gallery_role: str = "model"


@dataclass
class ZetaRecord:
    parent_zeta: float | None
    delta: float
    zeta: float
    restarted: bool = False


@dataclass
class DecisionRecord:
    required: bool
    reasons: list[str]
    checks: list[dict[str, Any]]
    against_generation_id: int | None


@dataclass
class PointerRecord:
    """A live-gallery pointer: which index serves, embedded by which model, queried by which generations."""

    generation_id: int
    index_path: str
    reason: str
    model_checkpoint: str | None = None
    zeta: float | None = None
    compatible_generations: list[int] = field(default_factory=list)
    backfill_id: int | None = None


@dataclass
class CompatRecord:
    metric: str
    generation_ids: list[int]
    matrix: list[list[float | None]]
    ac: float | None
    aa: float | None
    aca: float | None


@dataclass
class BackfillRecord:
    from_generation_id: int
    to_generation_id: int
    kind: str
    fraction: float
    order: str
    total: int
    reembedded: int
    index_path: str
    zeta_restarted: bool
    metrics: dict[str, Any]
    started_at: Any
    duration_s: float


@dataclass
class GenerationBundle:
    generation: GenerationRecord
    evaluations: list[EvaluationRecord] = field(default_factory=list)
    derived: dict[str, float | None] = field(default_factory=dict)
    diagnostics: dict[str, float | None] = field(default_factory=dict)
    zeta: ZetaRecord | None = None
    decision: DecisionRecord | None = None
    pointer: PointerRecord | None = None
    compat: list[CompatRecord] = field(default_factory=list)
    promotion: tuple[int | None, str] | None = None  # (previous production generation, reason) when the gate promotes


def _sqlite_pragmas(engine: Engine) -> None:
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _: Any) -> None:  # pragma: no cover - trivial
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()


class LineageStore:
    """Lineage database access. ``url``: any SQLAlchemy URL (``sqlite:///path`` by default)."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = create_engine(url, future=True)
        except (SQLAlchemyError, ValueError) as err:
            raise LineageError(f"cannot open lineage database {url!r} ({err}); set lineage.db_url to a valid SQLAlchemy URL") from None
        _sqlite_pragmas(self.engine)
        upgrade_schema(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        with self._sessions.begin() as s:
            info = s.get(SchemaInfo, 1)
            if info is None:
                s.add(SchemaInfo(id=1, version=SCHEMA_VERSION))
            elif info.version > SCHEMA_VERSION:
                raise LineageError(f"lineage database {url} has schema v{info.version}, newer than this bctflow (v{SCHEMA_VERSION}); upgrade bctflow")
            elif info.version < SCHEMA_VERSION:
                info.version = SCHEMA_VERSION

    def close(self) -> None:
        self.engine.dispose()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        with self._sessions.begin() as s:
            yield s

    # ---- reads ---------------------------------------------------------------------------
    def next_generation_id(self) -> int:
        with self._sessions() as s:
            top = s.scalar(select(func.max(Generation.id)))
        return 0 if top is None else int(top) + 1

    def count(self) -> int:
        with self._sessions() as s:
            return int(s.scalar(select(func.count(Generation.id))) or 0)

    def generation(self, gen_id: int) -> Generation:
        with self._sessions() as s:
            g = s.get(Generation, gen_id)
            if g is None:
                raise LineageError(f"generation {gen_id} is not in the lineage; `bctflow lineage` lists the existing ones")
            return g

    def generation_by_name(self, name: str) -> Generation | None:
        with self._sessions() as s:
            return s.scalar(select(Generation).where(Generation.name == name))

    def generations(self) -> list[Generation]:
        with self._sessions() as s:
            return list(s.scalars(select(Generation).order_by(Generation.id)))

    def live_pointer(self) -> GalleryPointer | None:
        with self._sessions() as s:
            return s.scalar(select(GalleryPointer).order_by(GalleryPointer.id.desc()).limit(1))

    def live_pointers(self) -> list[GalleryPointer]:
        with self._sessions() as s:
            return list(s.scalars(select(GalleryPointer).order_by(GalleryPointer.id)))

    def live_generation_id(self) -> int | None:
        p = self.live_pointer()
        return None if p is None else p.generation_id

    def production_generation_id(self) -> int | None:
        """The generation the `production` alias points to (latest promotion)."""
        with self._sessions() as s:
            return s.scalar(select(Promotion.generation_id).order_by(Promotion.id.desc()).limit(1))

    def promotions(self) -> list[Promotion]:
        with self._sessions() as s:
            return list(s.scalars(select(Promotion).order_by(Promotion.id)))

    def backfills(self) -> list[BackfillEvent]:
        with self._sessions() as s:
            return list(s.scalars(select(BackfillEvent).order_by(BackfillEvent.id)))

    def compat_summaries(self, as_of: int | None = None) -> list[CompatSummary]:
        with self._sessions() as s:
            q = select(CompatSummary)
            if as_of is not None:
                q = q.where(CompatSummary.as_of_generation_id == as_of)
            return list(s.scalars(q.order_by(CompatSummary.id)))

    def decision(self, gen_id: int) -> BackfillDecision | None:
        with self._sessions() as s:
            return s.scalar(select(BackfillDecision).where(BackfillDecision.generation_id == gen_id))

    def record_promotion(self, gen_id: int, *, forced: bool, by: str, reason: str, before_commit: Callable[[], None] | None = None) -> None:
        """Record that `production` now points to ``gen_id`` (one transaction; ``before_commit`` moves the alias)."""
        prev = self.production_generation_id()
        try:
            with self._sessions.begin() as s:
                g = s.get(Generation, gen_id)
                if g is None:
                    raise LineageError(f"generation {gen_id} is not in the lineage; `bctflow lineage` lists the existing ones")
                g.promoted = True
                s.add(Promotion(generation_id=gen_id, previous_generation_id=prev, forced=forced, by=by, reason=reason))
                s.flush()
                if before_commit is not None:
                    before_commit()
        except SQLAlchemyError as err:
            raise LineageError(f"promotion of generation {gen_id} failed and was rolled back ({err})") from err

    def record_backfill(
        self, event: BackfillRecord, pointer: PointerRecord, retire: list[int], before_commit: Callable[[], None] | None = None, promote: bool = False
    ) -> int:
        """Record a finished backfill and switch the live pointer (one transaction). Returns the event id.

        ``promote``: the target also becomes the production generation (after a full backfill).
        """
        prev = self.production_generation_id()
        try:
            with self._sessions.begin() as s:
                ev = BackfillEvent(**asdict(event))
                s.add(ev)
                s.flush()
                pointer.backfill_id = ev.id
                s.add(GalleryPointer(**asdict(pointer)))
                if promote:
                    target = s.get(Generation, event.to_generation_id)
                    if target is not None:
                        target.promoted = True
                    s.add(Promotion(generation_id=event.to_generation_id, previous_generation_id=prev, forced=False, by="backfill",
                                    reason=f"full backfill {ev.id}: the live gallery now holds its embeddings"))
                for gid in retire:
                    g = s.get(Generation, gid)
                    if g is not None:
                        g.status = "retired"
                s.flush()
                if before_commit is not None:
                    before_commit()
                return int(ev.id)
        except SQLAlchemyError as err:
            raise LineageError(f"recording the backfill failed and was rolled back ({err}); the live gallery was not switched") from err

    def serving_generation_ids(self) -> list[int]:
        with self._sessions() as s:
            return list(s.scalars(select(Generation.id).where(Generation.status == "serving").order_by(Generation.id)))

    def evaluations(self, query_generation_id: int | None = None) -> list[Evaluation]:
        with self._sessions() as s:
            q = select(Evaluation)
            if query_generation_id is not None:
                q = q.where(Evaluation.query_generation_id == query_generation_id)
            return list(s.scalars(q.order_by(Evaluation.id)))

    def metric_value(self, query_id: int, gallery_id: int, metric: str, query_role: str = "model", gallery_role: str = "model") -> float | None:
        with self._sessions() as s:
            return s.scalar(
                select(Evaluation.value).where(
                    Evaluation.query_generation_id == query_id,
                    Evaluation.gallery_generation_id == gallery_id,
                    Evaluation.metric == metric,
                    Evaluation.query_role == query_role,
                    Evaluation.gallery_role == gallery_role,
                )
            )

    # ---- writes --------------------------------------------------------------------------
    def commit_generation(self, bundle: GenerationBundle, before_commit: Callable[[], None] | None = None) -> None:
        """Insert everything about one generation in one transaction.

        ``before_commit`` runs after all rows are flushed (constraints checked)
        and before COMMIT; if it or the commit raises, nothing is written.
        """
        g = bundle.generation
        try:
            with self._sessions.begin() as s:
                if s.get(Generation, g.id) is not None:
                    raise LineageError(f"generation {g.id} already exists in the lineage; another run committed it first, rerun to create the next one")
                s.add(Generation(**asdict(g)))
                s.flush()
                for e in bundle.evaluations:
                    s.add(Evaluation(**asdict(e)))
                for name, value in bundle.derived.items():
                    s.add(GenerationMetric(generation_id=g.id, kind="derived", name=name, value=value))
                for name, value in bundle.diagnostics.items():
                    s.add(GenerationMetric(generation_id=g.id, kind="diagnostic", name=name, value=value))
                if bundle.zeta is not None:
                    s.add(ZetaStep(generation_id=g.id, **asdict(bundle.zeta)))
                if bundle.decision is not None:
                    s.add(BackfillDecision(generation_id=g.id, **asdict(bundle.decision)))
                if bundle.pointer is not None:
                    s.add(GalleryPointer(**asdict(bundle.pointer)))
                for c in bundle.compat:
                    s.add(CompatSummary(as_of_generation_id=g.id, **asdict(c)))
                if bundle.promotion is not None:
                    prev, reason = bundle.promotion
                    s.add(Promotion(generation_id=g.id, previous_generation_id=prev, forced=False, by="gate", reason=reason))
                s.flush()
                if before_commit is not None:
                    before_commit()
        except SQLAlchemyError as err:
            raise LineageError(f"lineage update for generation {g.id} failed and was rolled back ({type(err).__name__}: {err}); nothing was written") from err

    # ---- export --------------------------------------------------------------------------
    def to_json(self) -> list[dict[str, Any]]:
        """The ``bctflow lineage --json`` document (schema in README.md)."""
        with self._sessions() as s:
            gens = list(s.scalars(select(Generation).order_by(Generation.id)))
            evals = list(s.scalars(select(Evaluation)))
            gmetrics = list(s.scalars(select(GenerationMetric)))
            decisions = {d.generation_id: d for d in s.scalars(select(BackfillDecision))}
            zetas = {z.generation_id: z for z in s.scalars(select(ZetaStep))}
            live = s.scalar(select(GalleryPointer).order_by(GalleryPointer.id.desc()).limit(1))
            production = s.scalar(select(Promotion).order_by(Promotion.id.desc()).limit(1))
            promotions = list(s.scalars(select(Promotion).order_by(Promotion.id)))
            compat: dict[int, dict[str, Any]] = {}
            for c in s.scalars(select(CompatSummary).order_by(CompatSummary.id)):
                compat.setdefault(c.as_of_generation_id, {})[c.metric] = {"generations": c.generation_ids, "matrix": c.matrix, "ac": c.ac, "aa": c.aa, "aca": c.aca}
            backfills = list(s.scalars(select(BackfillEvent).order_by(BackfillEvent.id)))

        table: dict[tuple[int, str, int, str], dict[str, float]] = {}
        for e in evals:
            table.setdefault((e.query_generation_id, e.query_role, e.gallery_generation_id, e.gallery_role), {})[e.metric] = e.value
        derived: dict[int, dict[str, float | None]] = {}
        diags: dict[int, dict[str, float | None]] = {}
        for m in gmetrics:
            (derived if m.kind == "derived" else diags).setdefault(m.generation_id, {})[m.name] = m.value

        def block(q: int, qr: str, g: int | None, gr: str = "model") -> dict[str, float] | None:
            if g is None:
                return None
            vals = table.get((q, qr, g, gr))
            return {k: vals[k] for k in RETRIEVAL_METRICS if k in vals} if vals else None

        def pair(gid: int, prefix: str, keys: tuple[str, ...] = DERIVED_METRICS) -> dict[str, float | None] | None:
            d = derived.get(gid, {})
            vals = {k: d.get(f"{prefix}/{k}") for k in keys}
            return vals if any(f"{prefix}/{k}" in d for k in keys) else None

        out = []
        for g in gens:
            p = g.parent_id
            has_ref = any(k[0] == g.id and k[1] == "reference" for k in table)
            against = {
                str(gal): block(g.id, "model", gal)
                for (q, qr, gal, gr) in table
                if q == g.id and qr == "model" and gr == "model" and gal != g.id
            }
            dec = decisions.get(g.id)
            z = zetas.get(g.id)
            out.append(
                {
                    "id": g.id,
                    "name": g.name,
                    "parent": p,
                    "status": g.status,
                    "live": live is not None and live.generation_id == g.id,
                    "live_gallery_accepts_queries": live is not None and g.id in (live.compatible_generations or [live.generation_id]),
                    "promoted": bool(g.promoted),
                    "production": production is not None and production.generation_id == g.id,
                    "promotions": [
                        {"forced": pr.forced, "by": pr.by, "reason": pr.reason, "at": pr.at.isoformat()} for pr in promotions if pr.generation_id == g.id
                    ],
                    "backfills": [
                        {"id": b.id, "kind": b.kind, "from": b.from_generation_id, "fraction": b.fraction, "order": b.order, "total": b.total,
                         "reembedded": b.reembedded, "zeta_restarted": b.zeta_restarted, "duration_s": b.duration_s, "metrics": b.metrics,
                         "finished_at": b.finished_at.isoformat()}
                        for b in backfills if b.to_generation_id == g.id
                    ],
                    "compatibility": compat.get(g.id),
                    "alignment": g.alignment,
                    "geometry": g.geometry,
                    "zeta": g.zeta,
                    "zeta_step": None if z is None else {"parent_zeta": z.parent_zeta, "delta": z.delta, "restarted": z.restarted},
                    "curvature": g.curvature,
                    "embed_dim": g.embed_dim,
                    "dataset": g.dataset,
                    "data_hash": g.data_hash,
                    "class_order": g.class_order,
                    "architecture": g.architecture,
                    "hyperparameters": g.hyperparameters,
                    "checkpoint": g.checkpoint_path,
                    "index": g.index_path,
                    "mlflow_model": g.mlflow_model,
                    "mlflow_version": g.mlflow_version,
                    "mlflow_run_id": g.mlflow_run_id,
                    "created_at": g.created_at.isoformat() if g.created_at else None,
                    "backfill_required": None if dec is None else dec.required,
                    "backfill_reasons": [] if dec is None else list(dec.reasons),
                    "backfill_checks": [] if dec is None else list(dec.checks),
                    "backfill_against": None if dec is None else dec.against_generation_id,
                    "diagnostics": diags.get(g.id, {}),
                    "metrics": {
                        "self": block(g.id, "model", g.id),
                        "cross": block(g.id, "model", p),
                        "parent_self": (pair(g.id, "parent_self", RETRIEVAL_METRICS) or block(p, "model", p)) if p is not None else None,
                        "p_com": pair(g.id, "p_com"),
                        "p_com_denominator": pair(g.id, "p_com_denominator"),
                        "p_up": pair(g.id, "p_up"),
                        "reference": (
                            {"self": block(g.id, "reference", g.id, "reference"), "cross": block(g.id, "reference", p)}
                            if has_ref
                            else None
                        ),
                        "against": against,
                    },
                }
            )
        return out
