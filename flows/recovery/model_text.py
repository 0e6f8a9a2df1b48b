"""The registered model's text by the lineage: its description (what the model is, the newest committed generation's
lineage picture inline) and each version's description led by its generation's one-line state (docs/design.md §7.17).
Kept current by every commit and by the roll-forward (:mod:`flows.recovery.reconcile`)."""

from __future__ import annotations

from urllib.parse import quote

from registry.lineage import LineageDB
from registry.tracking.registered_model import MODEL_DESCRIPTION

__all__ = ["LINEAGE_ARTIFACT", "model_description", "picture_markdown", "with_state"]

#: where the picture lies in each generation's run
LINEAGE_ARTIFACT = "lineage/lineage.png"


def picture_markdown(run_id: str, alt: str) -> str:
    """The lineage picture of run ``run_id`` (its artifact :data:`LINEAGE_ARTIFACT`) inline in an MLflow description:
    the MLflow server's ``get-artifact`` endpoint, relative, so it shows on the registered model's and the version's
    pages alike."""
    return f"![{alt}](get-artifact?path={quote(LINEAGE_ARTIFACT, safe='')}&run_uuid={run_id})"


def model_description(store: LineageDB) -> str | None:
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
