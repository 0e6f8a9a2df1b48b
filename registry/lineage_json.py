"""The lineage as one JSON document (``bctflow lineage --json``; schema in README.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from components.evaluation import COMPAT_METRICS, REPORTED_METRICS, DerivedMetrics
from registry import orm
from registry.orm import Generation
from registry.paths import WorkspacePaths

__all__ = ["lineage_document"]

#: (query generation, query role, gallery generation, gallery role) → {metric: value}
EvalTable = dict[tuple[int, str, int, str], dict[str, float]]


def _block(table: EvalTable, q: int, qr: str, g: int | None, gr: str = "model") -> dict[str, float] | None:
    if g is None:
        return None
    vals = table.get((q, qr, g, gr))
    return {k: vals[k] for k in REPORTED_METRICS if k in vals} if vals else None


def _per_metric(block: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any] | None:
    return {k: block.get(k) for k in keys} if block else None


def _metrics(g: Generation, table: EvalTable, derived: DerivedMetrics) -> dict[str, Any]:
    p = g.parent_id
    has_ref = any(k[0] == g.id and k[1] == "reference" for k in table)
    against = {
        str(gal): _block(table, g.id, "model", gal)
        for (q, qr, gal, gr) in table
        if q == g.id and qr == "model" and gr == "model" and gal != g.id
    }
    return {
        "self": _block(table, g.id, "model", g.id),
        "cross": _block(table, g.id, "model", p),
        "parent_self": (_per_metric(derived.parent_self, REPORTED_METRICS) or _block(table, p, "model", p))
        if p is not None
        else None,
        "p_com": _per_metric(derived.p_com, COMPAT_METRICS),
        "p_com_denominator": _per_metric(derived.p_com_denominator, COMPAT_METRICS),
        "p_up": _per_metric(derived.p_up, COMPAT_METRICS),
        "reference": {
            "self": _block(table, g.id, "reference", g.id, "reference"),
            "cross": _block(table, g.id, "reference", p),
        }
        if has_ref
        else None,
        "against": against,
    }


@dataclass
class _Rows:
    """Every row the document is made of, read in one session."""

    gens: list[Generation]
    table: EvalTable
    derived: dict[int, dict[str, float | None]]
    diags: dict[int, dict[str, float | None]]
    decisions: dict[int, orm.BackfillDecision]
    zetas: dict[int, orm.ZetaStep]
    live: orm.GalleryPointer | None
    promotions: list[orm.Promotion]
    compat: dict[int, dict[str, Any]]
    backfills: list[orm.BackfillEvent]


def _read(sessions: sessionmaker[Session]) -> _Rows:
    with sessions() as s:
        rows = _Rows(
            gens=list(s.scalars(select(Generation).order_by(Generation.id))),
            table={},
            derived={},
            diags={},
            decisions={d.generation_id: d for d in s.scalars(select(orm.BackfillDecision))},
            zetas={z.generation_id: z for z in s.scalars(select(orm.ZetaStep))},
            live=s.scalar(select(orm.GalleryPointer).order_by(orm.GalleryPointer.id.desc()).limit(1)),
            promotions=list(s.scalars(select(orm.Promotion).order_by(orm.Promotion.id))),
            compat={},
            backfills=list(s.scalars(select(orm.BackfillEvent).order_by(orm.BackfillEvent.id))),
        )
        for c in s.scalars(select(orm.CompatSummary).order_by(orm.CompatSummary.id)):
            block = {"generations": c.generation_ids, "matrix": c.matrix, "ac": c.ac, "aa": c.aa, "aca": c.aca}
            rows.compat.setdefault(c.as_of_generation_id, {})[c.metric] = block
        for e in s.scalars(select(orm.Evaluation)):
            key = (e.query_generation_id, e.query_role, e.gallery_generation_id, e.gallery_role)
            rows.table.setdefault(key, {})[e.metric] = e.value
        for m in s.scalars(select(orm.GenerationMetric)):
            (rows.derived if m.kind == "derived" else rows.diags).setdefault(m.generation_id, {})[m.name] = m.value
    return rows


def _backfill(b: orm.BackfillEvent) -> dict[str, Any]:
    return {
        "id": b.id,
        "kind": b.kind,
        "from": b.from_generation_id,
        "fraction": b.fraction,
        "order": b.order,
        "total": b.total,
        "reembedded": b.reembedded,
        "zeta_restarted": b.zeta_restarted,
        "duration_s": b.duration_s,
        "metrics": b.metrics,
        "finished_at": b.finished_at.isoformat(),
    }


def _roles(g: Generation, rows: _Rows) -> dict[str, Any]:
    """Live gallery, accepted queries, production, promotions and backfills of one generation."""
    live = rows.live
    accepted = (live.compatible_generations or [live.generation_id]) if live is not None else []
    production = rows.promotions[-1].generation_id if rows.promotions else None
    return {
        "live": live is not None and live.generation_id == g.id,
        "live_gallery_accepts_queries": g.id in accepted,
        "compatible_with_live": g.compatible_with_live,
        "promoted": bool(g.promoted),
        "production": production == g.id,
        "promotions": [
            {"forced": pr.forced, "by": pr.by, "reason": pr.reason, "at": pr.at.isoformat()}
            for pr in rows.promotions
            if pr.generation_id == g.id
        ],
        "backfills": [_backfill(b) for b in rows.backfills if b.to_generation_id == g.id],
    }


def _decision(g: Generation, rows: _Rows) -> dict[str, Any]:
    dec = rows.decisions.get(g.id)
    return {
        "backfill_required": None if dec is None else dec.required,
        "backfill_reasons": [] if dec is None else list(dec.reasons),
        "backfill_checks": [] if dec is None else list(dec.checks),
        "backfill_against": None if dec is None else dec.against_generation_id,
    }


def lineage_document(sessions: sessionmaker[Session], paths: WorkspacePaths) -> list[dict[str, Any]]:
    """Every generation with its metrics, ζ, decision, roles, promotions and backfills, oldest first; paths are
    absolute (``paths`` joins the stored workspace-relative ones to the workspace)."""
    rows = _read(sessions)
    for row in (*rows.gens, rows.live, *rows.backfills):
        paths.resolve_row(row)
    out = []
    for g in rows.gens:
        z = rows.zetas.get(g.id)
        zeta_step = None if z is None else {"parent_zeta": z.parent_zeta, "delta": z.delta, "restarted": z.restarted}
        out.append(
            {
                "id": g.id,
                "name": g.name,
                "parent": g.parent_id,
                "status": g.status,
                **_roles(g, rows),
                "compatibility": rows.compat.get(g.id),
                "alignment": g.alignment,
                "geometry": g.geometry,
                "zeta": g.zeta,
                "zeta_step": zeta_step,
                "curvature": g.curvature,
                "embed_dim": g.embed_dim,
                "dataset": g.dataset,
                "data_hash": g.data_hash,
                "class_order": g.class_order,
                "architecture": g.architecture,
                "hyperparameters": g.hyperparameters,
                "checkpoint": g.checkpoint_path,
                "checkpoint_sha256": g.checkpoint_sha256,
                "code_digest": g.code_digest,
                "index": g.index_path,
                "mlflow_model": g.mlflow_model,
                "mlflow_version": g.mlflow_version,
                "mlflow_run_id": g.mlflow_run_id,
                "created_at": g.created_at.isoformat() if g.created_at else None,
                **_decision(g, rows),
                "diagnostics": rows.diags.get(g.id, {}),
                "metrics": _metrics(g, rows.table, DerivedMetrics.from_rows(rows.derived.get(g.id, {}))),
            }
        )
    return out
