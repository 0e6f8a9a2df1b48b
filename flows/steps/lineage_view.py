"""The lineage picture of a generation's MLflow run: the committed lineage plus the generation being registered.

The lineage's timeline (:meth:`registry.lineage.LineageStore.timeline`) with the generation being registered at its
end, drawn by :func:`components.evaluation.lineage_plot.lineage_picture` into the generation's staging folder; the
registration logs it as ``lineage/lineage.png`` and the registered model's description shows the newest committed
generation's (docs/design.md §7.17). Each version's description leads with its generation's state in one line
(:meth:`~components.evaluation.lineage_timeline.Timeline.state`), kept current by :func:`with_state`.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from components.evaluation.lineage_plot import lineage_picture
from components.evaluation.lineage_timeline import GenerationStep, Timeline, short_reasons
from flows.planning import GenerationPlan
from flows.steps.results import Evaluation
from registry.lineage import LineageStore
from registry.tracking.registered_model import MODEL_DESCRIPTION

__all__ = [
    "LINEAGE_ARTIFACT",
    "draw_lineage",
    "model_description",
    "picture_markdown",
    "registering_timeline",
    "with_state",
]

#: where the picture lies in each generation's run
LINEAGE_ARTIFACT = "lineage/lineage.png"


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


def picture_markdown(run_id: str, alt: str) -> str:
    """The lineage picture of run ``run_id`` (its artifact :data:`LINEAGE_ARTIFACT`) inline in an MLflow description:
    the MLflow server's ``get-artifact`` endpoint, relative, so it shows on the registered model's and the version's
    pages alike."""
    return f"![{alt}](get-artifact?path={quote(LINEAGE_ARTIFACT, safe='')}&run_uuid={run_id})"


def model_description(store: LineageStore) -> str | None:
    """The registered model's description by the lineage: what the model is, and the newest committed generation's
    lineage picture, shown inline (the run's artifact through the MLflow server's ``get-artifact`` endpoint) with a
    link to its run. None for an empty lineage."""
    gens = store.generations()
    if not gens or gens[-1].mlflow_run_id is None:
        return None
    g = gens[-1]
    return "\n\n".join(
        [
            MODEL_DESCRIPTION,
            f"**The lineage** as of generation {g.id} ({g.name}, version {g.mlflow_version}; its run "
            f"[{g.mlflow_run_id}](#/runs/{g.mlflow_run_id}), artifact `{LINEAGE_ARTIFACT}`):",
            picture_markdown(g.mlflow_run_id, f"lineage as of generation {g.id}"),
            "Boxes: generations (alignment, ζ, version; ✓/✗ the decision metric's cross vs old-old against the live "
            "gallery), framed green / red by compatibility with the live gallery, filled amber when a backfill is "
            "required (the reason under the box); above: ★ production, promoted or not promoted; below: the live "
            "gallery's generation; arcs: the generation each aligned to; diamonds: backfills. The legend is on the "
            "figure.",
        ]
    )


def with_state(description: str, state: str) -> str:
    """A version's ``description`` led by the one-line ``state``: its first paragraph replaced — or, in a description
    written before versions led with their state (it opens with ``Generation N (…)``), put before it."""
    head, _, rest = description.partition("\n\n")
    if not description or head.startswith("Generation "):
        return "\n\n".join(filter(None, [state, description]))
    return "\n\n".join(filter(None, [state, rest]))
