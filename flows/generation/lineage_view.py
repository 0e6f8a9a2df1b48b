"""The lineage picture of a generation's MLflow run: the committed lineage plus the generation being registered.

The lineage's timeline (:meth:`registry.lineage.LineageDB.timeline`) with the generation being registered at its
end, drawn by :func:`components.evaluation.lineage_plot.lineage_picture` into the generation's staging folder; the
registration logs it as ``lineage/lineage.png`` and the registered model's description shows the newest committed
generation's (docs/design.md §7.17). Each version's description leads with its generation's state in one line
(:meth:`~components.evaluation.lineage_timeline.Timeline.state`), kept current by
:func:`flows.recovery.model_text.with_state`.
"""

from __future__ import annotations

from pathlib import Path

from components.evaluation.lineage_plot import lineage_picture
from components.evaluation.lineage_timeline import GenerationStep, Timeline, short_reasons
from flows.generation.results import Evaluation
from flows.planning import GenerationPlan

__all__ = ["draw_lineage", "registering_timeline"]


def registering_timeline(plan: GenerationPlan, ev: Evaluation, promoted: bool) -> Timeline:
    """The committed lineage as planned (:attr:`GenerationPlan.timeline`) with this generation — registered, not yet
    committed — at its end; cross and old-old on the decision metric, and the evaluation's backfill decision.
    ``promoted``: it passed the promotion gate."""
    metric = plan.params.backfill.rules.metric
    cross, old = ev.summary.get("cross") or {}, ev.summary.get("parent_self") or {}
    step = GenerationStep(
        gen_id=plan.gen_id,
        name=plan.name,
        alignment=plan.alignment,
        zeta=plan.zeta,
        version=None,
        parent_id=plan.parent.id if plan.parent else None,
        compatible=ev.compatible if plan.parent else None,
        cross=cross.get(metric),
        old_old=old.get(metric),
        promoted=promoted,
        backfill_required=ev.decision.required if plan.parent else None,
        backfill_reasons=tuple(ev.decision.reasons),
        backfill_short=short_reasons(ev.decision.checks),
    )
    return plan.timeline.with_pending(step)


def draw_lineage(plan: GenerationPlan, timeline: Timeline) -> Path:
    """The picture of :func:`registering_timeline`'s ``timeline`` (this generation dashed at its end); the PNG's
    path."""
    title = f"bctflow lineage as generation {plan.gen_id} ({plan.name}) is registered"
    return lineage_picture(plan.staging_dir / "lineage.png", timeline, title)
