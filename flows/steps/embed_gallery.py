"""Step 3: embed the evaluation split and build the generation's FAISS index; generation 0 also embeds and indexes
the gallery corpus when params ``gallery:`` names one (:mod:`flows.steps.corpus`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from components.evaluation.diagnostics import clip_fraction
from components.indexing import GalleryIndex
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.live import CORPUS_DIR
from components.models import load_model
from components.training import embed_split
from flows.data import load_splits, open_corpus
from flows.planning import GenerationPlan
from flows.steps.corpus import check_index_recall, embed_corpus, index_corpus, index_gallery
from flows.steps.results import Gallery, Trained

__all__ = ["build_gallery"]


def build_gallery(plan: GenerationPlan, trained: Trained, on_batch: Callable[[int], None] | None = None) -> Gallery:
    """Embed the gallery (the test split) and, for the generation's own model, build its FAISS index."""
    p = plan.params
    splits = load_splits(p, plan.workspace)
    model = load_model(Path(trained.checkpoint))
    emb, labels, ids = embed_split(
        model,
        splits.test,
        batch_size=p.train.eval_batch_size,
        device=p.train.device,
        precision=p.train.precision,
        on_batch=on_batch,
    )
    gal = GalleryEmbeddings.from_embeddings(emb, model.spec, trained.curvature, ids, labels)
    out_dir = plan.role_dir(trained.role)
    gal.save(out_dir / "gallery.npz")
    index_dir = None
    if trained.role == "model":
        index = index_gallery(p, gal, generation=plan.gen_id)
        index_dir = str(index.save(out_dir / "index"))
        if plan.parent is None:
            _corpus(plan, trained, out_dir, Path(index_dir), on_batch)
    cf = clip_fraction(emb.clipped) if plan.geometry == "lorentz" else None
    return Gallery(trained.role, str(out_dir / "gallery.npz"), index_dir, len(gal), cf)


def _corpus(
    plan: GenerationPlan, trained: Trained, out_dir: Path, eval_index: Path, on_batch: Callable[[int], None] | None
) -> None:
    """Generation 0 serves the live gallery: embed and index the corpus (resumable), or check the evaluation index."""
    p, ws = plan.params, plan.workspace
    if open_corpus(p, ws) is None:
        check_index_recall(p, GalleryIndex.load(eval_index), eval_index)
        return
    folder = out_dir / CORPUS_DIR
    store, _ = embed_corpus(
        p, ws, Path(trained.checkpoint), folder / "gallery", generation=plan.gen_id, on_batch=on_batch
    )
    index = index_corpus(p, store, folder / "index", generation=plan.gen_id)
    check_index_recall(p, index, folder / "index")
