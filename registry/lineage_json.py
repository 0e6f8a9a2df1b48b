"""The lineage as one JSON document (``bctflow lineage --json``; schema in docs/lineage-json.md)."""

from __future__ import annotations

from typing import Any

from components.evaluation import COMPAT_METRICS, DerivedMetrics
from components.evaluation.lineage_timeline import GenerationStep, Timeline
from registry import orm
from registry.lineage_rows import LineageRows, block, cross_block, parent_self_block, per_metric
from registry.orm import Generation

__all__ = ["lineage_document"]


def _metrics(g: Generation, rows: LineageRows) -> dict[str, Any]:
    table, p = rows.table, g.parent_id
    derived = DerivedMetrics.from_rows(rows.derived.get(g.id, {}))
    has_ref = any(k[0] == g.id and k[1] == "reference" for k in table)
    against = {
        str(gal): block(table, g.id, "model", gal)
        for (q, qr, gal, gr) in table
        if q == g.id and qr == "model" and gr == "model" and gal != g.id
    }
    return {
        "self": block(table, g.id, "model", g.id),
        "cross": cross_block(rows, g),
        "parent_self": parent_self_block(rows, g),
        "p_com": per_metric(derived.p_com, COMPAT_METRICS),
        "p_com_denominator": per_metric(derived.p_com_denominator, COMPAT_METRICS),
        "p_up": per_metric(derived.p_up, COMPAT_METRICS),
        "reference": {
            "self": block(table, g.id, "reference", g.id, "reference"),
            "cross": block(table, g.id, "reference", p),
        }
        if has_ref
        else None,
        "against": against,
    }


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


def _bridge(b: orm.FittedBridge) -> dict[str, Any]:
    return {
        "to": b.to_generation_id,
        "role": b.role,
        "kind": b.kind,
        "version": b.version,
        "sha256": b.sha256,
        "sample": b.sample,
        "fit_error": b.fit_error,
        "mlflow_version": b.mlflow_version,
        "path": b.path,
    }


def _route_choice(c: orm.ChosenRoute) -> dict[str, Any]:
    return {
        "from": c.from_generation_id,
        "route": c.route,
        "rule": c.rule,
        "min_map": c.min_map,
        "met_bar": c.met_bar,
        "line": c.line,
        "evidence": c.evidence,
        "at": c.created_at.isoformat(),
    }


def _night(n: orm.Night) -> dict[str, Any]:
    return {
        "night": n.night,
        "policy": n.policy,
        "action": n.action,
        "fraction": n.fraction,
        "target": n.target_generation_id,
        "reason": n.reason,
        "forecast_map": n.forecast_map,
        "served_before": n.served_before,
        "outcome_map": n.outcome_map,
        "state": n.state,
        "items": n.items,
        "compute_s": n.compute_s,
        "backfill": n.backfill_id,
        "carry": n.carry,
    }


def _live_gallery(live: orm.GalleryPointer) -> dict[str, Any]:
    """Where the live gallery's vectors live, as its pointer row recorded them (null values: before revision 0007)."""
    return {
        "store": live.store,
        "collection": live.collection,
        "rows_by_generation": live.rows_by_generation,
        "index_params": live.index_params,
        "switched_at": live.switched_at.isoformat() if live.switched_at else None,
    }


def _roles(g: Generation, step: GenerationStep, rows: LineageRows, timeline: Timeline) -> dict[str, Any]:
    """Live gallery, accepted queries, production, promotions and backfills of one generation."""
    live = rows.live
    accepted = (live.compatible_generations or [live.generation_id]) if live is not None else []
    return {
        "live": timeline.live == g.id,
        "live_gallery": _live_gallery(live) if live is not None and timeline.live == g.id else None,
        "live_gallery_accepts_queries": g.id in accepted,
        "compatible_with_live": step.compatible,
        "promoted": step.promoted,
        "production": timeline.production == g.id,
        "promotions": [
            {"forced": pr.forced, "by": pr.by, "reason": pr.reason, "at": pr.at.isoformat()}
            for pr in rows.promotions
            if pr.generation_id == g.id
        ],
        "backfills": [_backfill(b) for b in rows.backfills if b.to_generation_id == g.id],
        "bridges": [_bridge(b) for b in rows.bridges if b.from_generation_id == g.id],
        "route_choices": [_route_choice(c) for c in rows.route_choices if c.generation_id == g.id],
        # a night by the generation it trained; a night that trained nothing, by the production it started from
        "nights": [
            _night(n)
            for n in rows.nights
            if (n.generation_id if n.generation_id is not None else n.production_id) == g.id
        ],
    }


def _decision(g: Generation, rows: LineageRows) -> dict[str, Any]:
    """The backfill decision and ``backfill_done``: the newest backfill that put the whole live gallery in ``g``'s
    embeddings (a full backfill or a gallery transform; a partial one leaves the backfill to do)."""
    dec = rows.decisions.get(g.id)
    whole = [b.id for b in rows.backfills if b.to_generation_id == g.id and b.kind in ("full", "transform")]
    return {
        "backfill_required": None if dec is None else dec.required,
        "backfill_reasons": [] if dec is None else list(dec.reasons),
        "backfill_checks": [] if dec is None else list(dec.checks),
        "backfill_against": None if dec is None else dec.against_generation_id,
        "backfill_done": max(whole, default=None),
    }


def lineage_document(rows: LineageRows, timeline: Timeline) -> list[dict[str, Any]]:
    """Every generation with its metrics, ζ, decision, roles, promotions and backfills, oldest first; ``timeline``:
    the same rows' timeline (:func:`registry.timeline.lineage_timeline`), which says the roles."""
    steps = {step.gen_id: step for step in timeline.generations}
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
                **_roles(g, steps[g.id], rows, timeline),
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
                "metrics": _metrics(g, rows),
            }
        )
    return out
