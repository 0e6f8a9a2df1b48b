"""The lineage picture of a generation's MLflow run: the committed lineage plus the generation being registered.

The lineage's timeline (:meth:`registry.lineage.LineageStore.timeline`) with the generation being registered at its
end, drawn by :func:`components.evaluation.lineage_plot.lineage_picture` into the generation's staging folder; the
registration logs it as ``lineage/lineage.png`` and the registered model's description shows the newest committed
generation's (docs/design.md §7.17).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from components.evaluation.lineage_plot import lineage_picture
from components.evaluation.lineage_timeline import GenerationStep, Timeline
from flows.planning import GenerationPlan
from flows.steps.results import Evaluation
from registry.lineage import LineageStore
from registry.tracking.registered_model import MODEL_DESCRIPTION

__all__ = ["LINEAGE_ARTIFACT", "draw_lineage", "model_description", "registering_timeline"]

#: where the picture lies in each generation's run
LINEAGE_ARTIFACT = "lineage/lineage.png"


def registering_timeline(plan: GenerationPlan, ev: Evaluation, promoted: bool) -> Timeline:
    """The committed lineage as planned (:attr:`GenerationPlan.timeline`) with this generation — registered, not yet
    committed — at its end; cross and old-old on the decision metric. ``promoted``: it passed the promotion gate."""
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
    )
    return plan.timeline.with_pending(step)


def draw_lineage(plan: GenerationPlan, timeline: Timeline) -> Path:
    """The picture of :func:`registering_timeline`'s ``timeline`` (this generation dashed at its end); the PNG's
    path."""
    title = f"bctflow lineage as generation {plan.gen_id} ({plan.name}) is registered"
    return lineage_picture(plan.staging_dir / "lineage.png", timeline, title)


def model_description(store: LineageStore) -> str | None:
    """The registered model's description by the lineage: what the model is, and the newest committed generation's
    lineage picture, shown inline (the run's artifact through the MLflow server's ``get-artifact`` endpoint) with a
    link to its run. None for an empty lineage."""
    gens = store.generations()
    if not gens or gens[-1].mlflow_run_id is None:
        return None
    g = gens[-1]
    path = quote(LINEAGE_ARTIFACT, safe="")
    return "\n\n".join(
        [
            MODEL_DESCRIPTION,
            f"**The lineage** as of generation {g.id} ({g.name}, version {g.mlflow_version}; its run "
            f"[{g.mlflow_run_id}](#/runs/{g.mlflow_run_id}), artifact `{LINEAGE_ARTIFACT}`):",
            f"![lineage as of generation {g.id}](get-artifact?path={path}&run_uuid={g.mlflow_run_id})",
            "Boxes: generations (alignment, ζ, version; ✓/✗ the decision metric's cross vs old-old against the live "
            "gallery); arcs: the generation each aligned to; diamonds: backfills; ★ production.",
        ]
    )
