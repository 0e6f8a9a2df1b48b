"""Step 3: embed the role's evaluation gallery and, for the generation's own model, index it; generation 0 also
embeds and indexes the serving corpus when params ``gallery:`` name one, and records which index serves.

Every gallery goes through the one pipeline (:mod:`flows.gallery.pipeline`) into the role's folder, laid out
as a gallery version (:class:`~components.indexing.version.GalleryVersion`): ``gallery/`` + ``index/`` (the
evaluation split), ``corpus/gallery/`` + ``corpus/index/`` (the corpus), ``serving.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from components.evaluation.diagnostics import clip_fraction
from components.geometry import create_space
from components.indexing.version import GalleryVersion
from flows.gallery.data import evaluation_source, open_corpus
from flows.gallery.pipeline import embed_gallery, index_gallery
from flows.generation.results import EvaluationGallery, Trained
from flows.planning import GenerationPlan

__all__ = ["embed_and_index"]


def embed_and_index(
    plan: GenerationPlan, trained: Trained, on_batch: Callable[[int], None] | None = None
) -> EvaluationGallery:
    """Embed the evaluation split with the role's model (resumable, in staging) and, for the generation's own model,
    build its index; generation 0's folder becomes the first version the live gallery serves: its corpus (embedded
    and indexed here) or its evaluation split, recorded in ``serving.json``."""
    p = plan.params
    version = GalleryVersion(plan.role_dir(trained.role))
    ckpt = Path(trained.checkpoint)
    store = embed_gallery(
        p,
        evaluation_source(p, plan.workspace),
        ckpt,
        version.evaluation_store,
        generation=plan.gen_id,
        on_batch=on_batch,
    ).store
    index_dir = None
    if trained.role == "model":
        first = plan.parent is None
        corpus = open_corpus(p, plan.workspace) if first else None
        home = plan.workspace.home
        index_gallery(
            p, home, store, version.evaluation_index, generation=plan.gen_id, serving=first and corpus is None
        )
        index_dir = str(version.evaluation_index)
        if first:
            if corpus is not None:
                served = embed_gallery(
                    p, corpus, ckpt, version.corpus_store, generation=plan.gen_id, on_batch=on_batch
                ).store
                index_gallery(p, home, served, version.corpus_index, generation=plan.gen_id, corpus=True, serving=True)
            version.record_serving(p.gallery.source)
    clips = create_space(plan.geometry).radius_encodes_confidence  # the tangent radius is clipped at ζ
    cf = clip_fraction(store.column("clipped")) if clips else None
    return EvaluationGallery(trained.role, str(store.path), index_dir, len(store), cf)
