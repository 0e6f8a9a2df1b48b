"""Step 2 of a backfill: re-embed every gallery it keeps current (docs/design.md §7.6, §7.10) — the live version's
evaluation gallery (always: the next generation is evaluated against it) and the serving corpus of params
``gallery:`` — through the one gallery pipeline, in ``<home>/backfills/in_progress/`` laid out as a gallery version
(:class:`~components.indexing.version.GalleryVersion`). Step 1 (the plan made, saved or resumed, the items fixed) is
:mod:`flows.backfill.make`; steps 3 and 4 (publish, switch) :mod:`flows.backfill.publishing`.

:func:`select_items` fixes each gallery's items once — all, or the fraction first in ``order`` (highest hyperbolic
uncertainty, random, oldest stamps) — saved in ``selection/``. :func:`reembed` embeds them through
:func:`flows.gallery.pipeline.embed_gallery` — or, a gallery transform, carries the live rows through a transform
bridge (:mod:`flows.backfill.transform`); a killed process keeps every finished part.

A full backfill with ``backfill.restart_zeta`` rescales the target's embeddings into the ζ₀ ball (z ← z·ζ₀/ζ_g, a
copy of its checkpoint with ``tangent_scale``), so the chain that follows restarts at ζ₀ + Δζ; older generations
retire from compatibility duties.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from components.indexing.gallery import GalleryEmbeddings
from components.indexing.reader import PartReader
from components.indexing.version import GalleryVersion
from components.io import atomic_path
from components.models import load_model, save_model
from flows.backfill.plan import BackfillGallery, BackfillPlan
from flows.backfill.transform import transform_gallery
from flows.gallery.data import GallerySource, evaluation_source, open_corpus
from flows.gallery.pipeline import Embedded, embed_gallery, embed_some

__all__ = [
    "gallery_model_checkpoint",
    "gallery_source",
    "live_store",
    "own_evaluation",
    "reembed",
    "reembed_some",
    "select_items",
    "selected_positions",
]


def gallery_model_checkpoint(plan: BackfillPlan) -> Path:
    """The model that embeds the new gallery: the target, or its copy rescaled into the ζ₀ ball."""
    if not plan.restart_zeta:
        return Path(plan.target_checkpoint)
    path = plan.work_dir / "gallery_model.pt"
    if not path.exists():
        model = load_model(Path(plan.target_checkpoint))
        spec = model.spec
        assert spec.zeta is not None and plan.zeta is not None
        scaled = dataclasses.replace(spec, zeta=plan.zeta, tangent_scale=spec.tangent_scale * plan.zeta / spec.zeta)
        rescaled = type(model)(scaled)
        rescaled.load_state_dict(model.state_dict())
        save_model(rescaled, path)
    return path


def gallery_source(plan: BackfillPlan, gallery: BackfillGallery) -> GallerySource:
    """The items ``gallery`` embeds: the evaluation split, or the serving corpus of params ``gallery:``."""
    p, ws = plan.params, plan.workspace
    source = open_corpus(p, ws) if gallery.corpus else evaluation_source(p, ws)
    assert source is not None  # planned with a corpus
    return source


def live_store(plan: BackfillPlan, gallery: BackfillGallery) -> PartReader:
    """``gallery`` as the live version holds it now (rows stamped with the generation that embedded them)."""
    live = plan.live_version
    path = live.serving().gallery if gallery.corpus else live.evaluation_gallery()
    return PartReader(path, generation=plan.source_generation)


def own_evaluation(plan: BackfillPlan) -> GalleryEmbeddings:
    """The target generation's own embeddings of the evaluation split (its generation folder's gallery), in memory."""
    return PartReader(GalleryVersion(Path(plan.target_checkpoint).parent).evaluation_gallery()).embeddings()


def selected_positions(plan: BackfillPlan, gallery: BackfillGallery) -> np.ndarray:
    """Sorted positions (in its source's split) of the items of ``gallery`` this backfill re-embeds: all (full); the
    first ``selected`` in ``plan.order`` over the live gallery's own vectors — topping up, those the target did not
    embed already (partial); the corpus's items the live gallery does not hold (ingest). Reads only."""
    split = gallery_source(plan, gallery).split
    if plan.kind == "full":
        return np.arange(len(split), dtype=np.int64)
    if plan.kind == "ingest":
        if not gallery.corpus:
            return np.zeros(0, dtype=np.int64)
        held = live_store(plan, gallery).rows.ids
        return np.flatnonzero(~np.isin(split.ids, held)).astype(np.int64)
    current = live_store(plan, gallery)  # topping the target's share up: what it embeds already is not embedded again
    order = current.selection(plan.order, plan.seed, skip=plan.target if plan.top_up else None)
    chosen = current.rows.ids[order[: gallery.selected]]
    return np.sort(split.positions_of(chosen))


def select_items(plan: BackfillPlan, gallery: BackfillGallery) -> np.ndarray:
    """:func:`selected_positions`, computed once, saved in the work folder, then read back."""
    saved = plan.work_dir / "selection" / f"{gallery.name}.npy"
    if saved.exists():
        return np.load(saved)
    positions = selected_positions(plan, gallery)
    saved.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(saved) as tmp, open(tmp, "wb") as fh:
        np.save(fh, positions)
    return positions


def reembed_some(plan: BackfillPlan, max_items: int, on_batch: Callable[[int], None] | None = None) -> int:
    """Embed at most ``max_items`` more of the selected items (every gallery in turn, whole parts) and stop: a
    backfill spread over several runs, each within a budget (the lifecycle's carried re-embedding). Returns the items
    still to embed (0: :func:`reembed` finishes every gallery without embedding more)."""
    checkpoint, left, budget = gallery_model_checkpoint(plan), 0, max_items
    for gallery in plan.galleries:
        if not gallery.selected:
            continue
        out = plan.work_version.store(gallery.corpus)
        now, rest = embed_some(plan.params, gallery_source(plan, gallery), checkpoint, out, generation=plan.target,
                               positions=select_items(plan, gallery), max_items=budget, on_batch=on_batch)  # fmt: skip
        budget, left = budget - now, left + rest
    return left


def reembed(
    plan: BackfillPlan, on_batch: Callable[[int], None] | None = None
) -> list[tuple[BackfillGallery, Embedded]]:
    """Embed the selected items of every gallery with the target (resumable: finished parts are kept), pausing
    ``throttle_s`` after each part. Returns each gallery with what its embedding did."""
    checkpoint = gallery_model_checkpoint(plan)
    done = []
    for gallery in plan.galleries:
        if not gallery.selected:  # an ingest carries the evaluation gallery as it is
            continue
        out, p, pause = plan.work_version.store(gallery.corpus), plan.params, plan.throttle_s
        if plan.bridge is not None:  # a gallery transform: the live rows through the bridge, no model
            embedded = transform_gallery(
                p, live_store(plan, gallery), plan.bridge, out, on_batch=on_batch, throttle=pause
            )
        else:
            items = select_items(plan, gallery)
            embedded = embed_gallery(p, gallery_source(plan, gallery), checkpoint, out, generation=plan.target,
                                     positions=items, on_batch=on_batch, throttle=pause)  # fmt: skip
        done.append((gallery, embedded))
    return done
