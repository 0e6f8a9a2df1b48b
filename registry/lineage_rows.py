"""Every row the lineage's views are made of (the timeline, the JSON document), read in one session, and the
retrieval blocks both views show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from components.evaluation import REPORTED_METRICS, DerivedMetrics
from registry import orm
from registry.orm import Generation
from registry.paths import WorkspacePaths

__all__ = ["EvalTable", "LineageRows", "block", "cross_block", "parent_self_block", "per_metric", "read_rows"]

#: (query generation, query role, gallery generation, gallery role) → {metric: value}
EvalTable = dict[tuple[int, str, int, str], dict[str, float]]


@dataclass
class LineageRows:
    """The lineage's rows: generations, promotions, backfills, bridges, route choices, nights and live pointers oldest
    first;
    evaluations as a table; derived / diagnostic metrics, decisions, ζ steps and compatibility summaries by
    generation id."""

    gens: list[Generation]
    table: EvalTable
    derived: dict[int, dict[str, float | None]]
    diags: dict[int, dict[str, float | None]]
    decisions: dict[int, orm.BackfillDecision]
    zetas: dict[int, orm.ZetaStep]
    pointers: list[orm.GalleryPointer]
    promotions: list[orm.Promotion]
    compat: dict[int, dict[str, Any]]
    backfills: list[orm.BackfillEvent]
    bridges: list[orm.FittedBridge]
    route_choices: list[orm.ChosenRoute]
    nights: list[orm.Night]

    @property
    def live(self) -> orm.GalleryPointer | None:
        """The live gallery's pointer (the newest)."""
        return self.pointers[-1] if self.pointers else None


def read_rows(sessions: sessionmaker[Session], paths: WorkspacePaths) -> LineageRows:
    """All rows in one session; stored paths made absolute (``paths`` joins the workspace-relative ones to it)."""
    with sessions() as s:
        rows = LineageRows(
            gens=list(s.scalars(select(Generation).order_by(Generation.id))),
            table={},
            derived={},
            diags={},
            decisions={d.generation_id: d for d in s.scalars(select(orm.BackfillDecision))},
            zetas={z.generation_id: z for z in s.scalars(select(orm.ZetaStep))},
            pointers=list(s.scalars(select(orm.GalleryPointer).order_by(orm.GalleryPointer.id))),
            promotions=list(s.scalars(select(orm.Promotion).order_by(orm.Promotion.id))),
            compat={},
            backfills=list(s.scalars(select(orm.BackfillEvent).order_by(orm.BackfillEvent.id))),
            bridges=list(s.scalars(select(orm.FittedBridge).order_by(orm.FittedBridge.id))),
            route_choices=list(s.scalars(select(orm.ChosenRoute).order_by(orm.ChosenRoute.id))),
            nights=list(s.scalars(select(orm.Night).order_by(orm.Night.id))),
        )
        for c in s.scalars(select(orm.CompatSummary).order_by(orm.CompatSummary.id)):
            summary = {"generations": c.generation_ids, "matrix": c.matrix, "ac": c.ac, "aa": c.aa, "aca": c.aca}
            rows.compat.setdefault(c.as_of_generation_id, {})[c.metric] = summary
        for e in s.scalars(select(orm.Evaluation)):
            key = (e.query_generation_id, e.query_role, e.gallery_generation_id, e.gallery_role)
            rows.table.setdefault(key, {})[e.metric] = e.value
        for m in s.scalars(select(orm.GenerationMetric)):
            (rows.derived if m.kind == "derived" else rows.diags).setdefault(m.generation_id, {})[m.name] = m.value
    for row in (*rows.gens, *rows.pointers, *rows.backfills, *rows.bridges):
        paths.resolve_row(row)
    return rows


def block(table: EvalTable, q: int, qr: str, g: int | None, gr: str = "model") -> dict[str, float] | None:
    """The reported metrics of queries embedded by generation ``q`` (role ``qr``) on generation ``g``'s gallery."""
    if g is None:
        return None
    vals = table.get((q, qr, g, gr))
    return {k: vals[k] for k in REPORTED_METRICS if k in vals} if vals else None


def per_metric(values: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """``values`` on exactly ``keys`` (None for a missing one); None when there are none."""
    return {k: values.get(k) for k in keys} if values else None


def cross_block(rows: LineageRows, g: Generation) -> dict[str, float] | None:
    """Cross: ``g``'s queries on its parent's gallery (None for generation 0)."""
    return block(rows.table, g.id, "model", g.parent_id)


def parent_self_block(rows: LineageRows, g: Generation) -> dict[str, float | None] | None:
    """Old-old: the parent's queries on its own gallery, as ``g``'s evaluation measured it (else as the parent's)."""
    p = g.parent_id
    if p is None:
        return None
    derived = DerivedMetrics.from_rows(rows.derived.get(g.id, {}))
    return per_metric(derived.parent_self, REPORTED_METRICS) or block(rows.table, p, "model", p)
