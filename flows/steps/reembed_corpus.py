"""A backfill of the gallery corpus (docs/design.md §7.10): select, re-embed in resumable parts, publish.

Runs beside the evaluation split's backfill (:mod:`flows.steps.reembed`) when params
``gallery:`` names a corpus, with the same target, kind, fraction and order:

* :func:`corpus_selection` fixes the corpus items to re-embed (all, or the fraction
  first in ``order`` over the live corpus's own vectors, read part by part), saved
  once in the backfill's folder as ``corpus_positions.npy`` (sorted, so the files
  are read front to back);
* :func:`embed_corpus_chunks` embeds them into ``corpus/`` of the backfill folder:
  a killed run keeps every finished part and re-embeds at most the one in flight;
* :func:`publish_corpus` assembles the new corpus store (full: the re-embedded
  parts; partial: the live corpus with those items swapped in, part by part),
  builds the ``index:`` type over it and measures its recall and retrieval.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from components.errors import ConfigError
from components.indexing.live import CORPUS_DIR
from components.indexing.mixed import order_items
from components.indexing.store import GalleryStore, PartWriter, mix_stores
from components.io import atomic_path
from flows.data import open_corpus
from flows.steps.corpus import check_index_recall, corpus_metrics, embed_corpus, index_corpus
from flows.steps.reembed import BackfillPlan, gallery_model_checkpoint

__all__ = ["corpus_selection", "embed_corpus_chunks", "live_corpus", "publish_corpus"]

_SELECTION = "corpus_positions.npy"


def live_corpus(plan: BackfillPlan) -> GalleryStore | None:
    """The corpus store the live gallery serves now (None: it serves the evaluation split)."""
    folder = Path(plan.source_gallery).parent / CORPUS_DIR / "gallery"
    return GalleryStore(folder) if folder.is_dir() else None


def corpus_selection(plan: BackfillPlan) -> np.ndarray | None:
    """Sorted corpus positions this backfill re-embeds (None without a corpus); computed once, then read back."""
    p, ws = plan.params, plan.workspace
    source = open_corpus(p, ws)
    if source is None:
        return None
    saved = plan.work_dir / _SELECTION
    if saved.exists():
        return np.load(saved)
    if plan.kind == "full":
        positions = np.arange(len(source), dtype=np.int64)
    else:
        current = live_corpus(plan)
        if current is None or len(current) != len(source):
            raise ConfigError(
                f"the live gallery does not serve the corpus {p.gallery.path} (yet, or it changed); run a full "
                "backfill (--fraction 1) to embed it"
            )
        uncertainty = current.column("uncertainty") if plan.order == "uncertainty" else None
        stamps = current.column("stamps") if plan.order == "oldest" else None
        ordered = order_items(len(current), plan.order, plan.seed, uncertainty=uncertainty, stamps=stamps)
        chosen_ids = current.column("ids")[ordered[: round(plan.fraction * len(current))]]
        positions = np.sort(source.item_positions(chosen_ids))
    with atomic_path(saved) as tmp, open(tmp, "wb") as fh:
        np.save(fh, positions)
    return positions


def embed_corpus_chunks(plan: BackfillPlan, on_batch: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Embed the selected corpus items not embedded yet. Returns (items embedded now, items selected)."""
    positions = corpus_selection(plan)
    if positions is None:
        return 0, 0
    _, embedded = embed_corpus(
        plan.params,
        plan.workspace,
        gallery_model_checkpoint(plan),
        plan.work_dir / CORPUS_DIR,
        generation=plan.target,
        positions=positions,
        on_batch=on_batch,
    )
    return embedded, len(positions)


def publish_corpus(plan: BackfillPlan, staging: Path) -> dict[str, float]:
    """Assemble and index the new corpus in ``staging/corpus/``; returns its index recall and retrieval metrics."""
    p = plan.params
    work = GalleryStore(plan.work_dir / CORPUS_DIR)
    folder = staging / CORPUS_DIR
    if plan.kind == "full":  # the re-embedded parts are the new corpus: hard links, the backfill folder keeps them
        shutil.copytree(work.path, folder / "gallery", copy_function=os.link)
        store = GalleryStore(folder / "gallery")
    else:
        current = live_corpus(plan)
        assert current is not None  # corpus_selection checked it
        store = mix_stores(current, work, PartWriter(folder / "gallery", p.backfill.chunk_size))
    index = index_corpus(p, store, folder / "index", generation=plan.target, compatible=[plan.target])
    check_index_recall(p, index, folder / "index")
    stamps = store.column("stamps")
    return {
        **corpus_metrics(p, store, index, seed=plan.seed),
        "corpus/share_embedded_by_target": float((stamps == plan.target).mean()),
        "corpus/index_recall_at_10": float(index.manifest.recall_at_10 or 1.0),
    }
