"""The lineage picture of a generation's MLflow run: the committed lineage plus the generation being registered.

Read from the lineage (``bctflow lineage --json``'s document, the backfill events and the live pointers they set)
and drawn by :func:`components.evaluation.lineage_plot.lineage_picture` into the generation's staging folder; the
registration logs it as ``lineage/lineage.png`` and the registered model's description shows the newest committed
generation's (docs/design.md §7.17).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from components.evaluation.lineage_plot import BackfillStep, GenerationStep, lineage_picture
from flows.planning import GenerationPlan
from flows.steps.results import Evaluation
from registry.lineage import LineageStore
from registry.tracking.registered_model import MODEL_DESCRIPTION

__all__ = ["LINEAGE_ARTIFACT", "draw_lineage", "lineage_steps", "model_description"]

#: where the picture lies in each generation's run
LINEAGE_ARTIFACT = "lineage/lineage.png"


def _committed(doc: dict[str, Any], metric: str) -> GenerationStep:
    m = doc.get("metrics") or {}
    return GenerationStep(
        gen_id=doc["id"],
        name=doc["name"],
        alignment=doc["alignment"],
        zeta=doc["zeta"],
        version=doc["mlflow_version"],
        parent_id=doc["parent"],
        compatible=doc["compatible_with_live"],
        cross=(m.get("cross") or {}).get(metric),
        old_old=(m.get("parent_self") or {}).get(metric),
        promoted=doc["promoted"],
        forced=any(p["forced"] for p in doc["promotions"]),
    )


def lineage_steps(
    store: LineageStore, metric: str
) -> tuple[list[GenerationStep | BackfillStep], int | None, int | None]:
    """(steps in the order they happened, the production generation, the live gallery's generation) of the
    committed lineage."""
    docs = store.to_json()
    restarts = {pt.backfill_id: pt.zeta for pt in store.live_pointers() if pt.backfill_id is not None}
    timed: list[tuple[str, GenerationStep | BackfillStep]] = [
        (d["created_at"] or "", _committed(d, metric)) for d in docs
    ]
    for b in store.backfills():
        zeta = restarts.get(b.id) if b.zeta_restarted else None
        timed.append((b.finished_at.isoformat(), BackfillStep(b.to_generation_id, b.kind, b.reembedded, b.total, zeta)))
    timed.sort(key=lambda t: t[0])
    production = next((d["id"] for d in docs if d["production"]), None)
    live = next((d["id"] for d in docs if d["live"]), None)
    return [s for _, s in timed], production, live


def draw_lineage(plan: GenerationPlan, ev: Evaluation, promoted: bool) -> Path:
    """The lineage with this generation (dashed: registered, not yet committed) at its end; the PNG's path."""
    metric = plan.params.backfill.rules.metric
    store = plan.workspace.lineage(plan.params, readonly=True)
    try:
        steps, production, live = lineage_steps(store, metric)
    finally:
        store.close()
    cross, old = ev.summary.get("cross") or {}, ev.summary.get("parent_self") or {}
    steps.append(
        GenerationStep(
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
            pending=True,
        )
    )
    if promoted:
        production = plan.gen_id
    if live is None:
        live = plan.gen_id  # generation 0 embeds the gallery
    title = f"bctflow lineage as generation {plan.gen_id} ({plan.name}) is registered"
    return lineage_picture(plan.staging_dir / "lineage.png", steps, production, live, metric, title)


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
