"""The lineage timeline from the lineage's rows: the one place that puts generations and backfills in the order
they happened (:class:`components.evaluation.lineage_timeline.Timeline`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from components.evaluation.lineage_timeline import BackfillStep, GenerationStep, Step, Timeline, short_reasons
from registry import orm
from registry.lineage_rows import LineageRows, cross_block, parent_self_block

__all__ = ["lineage_timeline"]


def _at(t: datetime | None) -> str:
    """ISO-8601 text, which orders as the times of one database do ("" for a time not recorded: first)."""
    return "" if t is None else t.isoformat()


def _on(values: Mapping[str, float | None] | None, metric: str | None) -> float | None:
    return (values or {}).get(metric) if metric is not None else None


def _generation(rows: LineageRows, g: orm.Generation, metric: str | None, forced: bool) -> GenerationStep:
    """``g``'s step: its roles, cross / old-old values on ``metric`` and backfill decision."""
    decision = rows.decisions.get(g.id)
    return GenerationStep(
        gen_id=g.id,
        name=g.name,
        alignment=g.alignment,
        zeta=g.zeta,
        version=g.mlflow_version,
        parent_id=g.parent_id,
        compatible=g.compatible_with_live,
        cross=_on(cross_block(rows, g), metric),
        old_old=_on(parent_self_block(rows, g), metric),
        promoted=bool(g.promoted),
        forced=forced,
        backfill_required=None if decision is None else decision.required,
        backfill_reasons=() if decision is None else tuple(decision.reasons),
        backfill_short=() if decision is None else short_reasons(decision.checks),
        night=_night(rows, g.id),
    )


def _night(rows: LineageRows, gen_id: int) -> str:
    """The lifecycle night that trained generation ``gen_id``: ``policy: action`` (empty: none)."""
    n = next((n for n in rows.nights if n.generation_id == gen_id), None)
    if n is None:
        return ""
    what = n.action if n.fraction is None or n.action in ("full", "keep") else f"{n.action} {n.fraction:.0%}"
    return f"{n.policy}: {what}" + (f" g{n.target_generation_id}" if n.target_generation_id is not None else "")


def _backfill(b: orm.BackfillEvent, restarts: dict[int, float | None]) -> BackfillStep:
    return BackfillStep(
        event_id=b.id,
        to_gen=b.to_generation_id,
        kind=b.kind,
        reembedded=b.reembedded,
        total=b.total,
        duration_s=b.duration_s,
        zeta_restart=restarts.get(b.id) if b.zeta_restarted else None,
    )


def lineage_timeline(rows: LineageRows, metric: str | None = None) -> Timeline:
    """Generations (by creation) and backfills (by when they finished) in the order they happened — at one time, a
    generation before a backfill, each kind by id — with the production generation (the latest promotion's) and the
    live gallery's. ``metric``: the metric of each generation's cross and old-old values (None: none).

    A backfill's ζ restart is the ζ of the live pointer it set."""
    forced = {p.generation_id for p in rows.promotions if p.forced}
    restarts = {pt.backfill_id: pt.zeta for pt in rows.pointers if pt.backfill_id is not None}
    timed: list[tuple[tuple[str, int, int], Step]] = [
        ((_at(g.created_at), 0, g.id), _generation(rows, g, metric, g.id in forced)) for g in rows.gens
    ]
    # an ingest (new items embedded by the gallery's own model) re-embeds nothing: not a step of the lineage
    timed += [((_at(b.finished_at), 1, b.id), _backfill(b, restarts)) for b in rows.backfills if b.kind != "ingest"]
    timed.sort(key=lambda t: t[0])
    live = rows.live
    return Timeline(
        steps=tuple(step for _, step in timed),
        production=rows.promotions[-1].generation_id if rows.promotions else None,
        live=None if live is None else live.generation_id,
        metric=metric,
    )
