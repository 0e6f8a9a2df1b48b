"""The gallery corpus (params ``gallery:``, docs/design.md §7.10): streamed, embedded in resumable parts, indexed.

By default the live gallery *is* the labelled evaluation split (``gallery.source:
eval_split``) and nothing here runs. With a corpus of its own (WebDataset shards,
a Parquet/CSV manifest, an image folder; labels optional), generation 0 and every
backfill embed it through :func:`embed_corpus` — a DataLoader over the files,
``backfill.chunk_size`` items per part written as it is produced, a killed run
resumed without re-embedding finished parts — and index it with
:func:`index_corpus` (the ``index:`` type, filled part by part, its recall@10
measured). The corpus files live in a ``corpus/`` folder beside the evaluation
gallery of the generation or live index version that serves it
(:func:`components.indexing.live.serving_index_dir`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from components.errors import ConfigError
from components.evaluation import retrieval_metrics
from components.indexing import GalleryIndex
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.store import GalleryStore, PartWriter, StoredPart
from components.models import load_model
from components.training import embed_stream
from components.training.device import cuda_available
from flows.data import load_splits, open_corpus
from flows.params import Params
from flows.specs import index_config
from flows.workspace import Workspace

__all__ = [
    "check_index_recall",
    "corpus_metrics",
    "embed_corpus",
    "index_corpus",
    "index_gallery",
]


def index_gallery(
    p: Params, gallery: GalleryEmbeddings, *, generation: int, compatible: list[int] | None = None
) -> GalleryIndex:
    """The ``index:`` type over an in-memory gallery (the labelled split a generation or backfill serves)."""
    return GalleryIndex.build(
        gallery.vectors(),
        gallery.ids,
        geometry=gallery.retrieval_geometry,
        curvature=gallery.curvature,
        generation=generation,
        compatible_generations=compatible,
        config=index_config(p),
    )


def _image_size(p: Params, ws: Workspace) -> int:
    return p.data.image_size or int(load_splits(p, ws).train.image_shape[0])


def embed_corpus(
    p: Params,
    ws: Workspace,
    checkpoint: Path,
    out_dir: Path,
    *,
    generation: int,
    positions: np.ndarray | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[GalleryStore, int]:
    """Embed the corpus items at ``positions`` (all when None) with ``checkpoint`` into a part store in ``out_dir``.

    Resumable: items of parts finished by an earlier, killed run are skipped. Returns
    (the finished store, items embedded by this call).
    """
    source = open_corpus(p, ws)
    if source is None:
        raise ConfigError("gallery.source is eval_split: there is no gallery corpus to embed")
    writer = PartWriter(out_dir, p.backfill.chunk_size)
    selected = np.arange(len(source)) if positions is None else np.asarray(positions, dtype=np.int64)
    done = writer.done_ids()
    if done.size:
        selected = selected[~np.isin(source.ids[selected], done)]
    embedded = 0
    if selected.size:
        model = load_model(checkpoint)
        curvature = float(model.curvature)
        loader = source.loader(
            selected,
            batch_size=p.train.eval_batch_size,
            workers=p.gallery.workers,
            pin_memory=cuda_available(),
            image_size=_image_size(p, ws),
        )
        for emb, labels, ids in embed_stream(model, loader, p.train.device, p.train.precision):
            part = GalleryEmbeddings.from_embeddings(emb, model.spec, curvature, ids, labels)
            writer.add(StoredPart(part, np.full(len(ids), generation, dtype=np.int64)))
            embedded += len(ids)
            if on_batch is not None:
                on_batch(len(ids))
    return writer.finish(), embedded


def index_corpus(
    p: Params, store: GalleryStore, out_dir: Path, *, generation: int, compatible: list[int] | None = None
) -> GalleryIndex:
    """Build the ``index:`` type over the store part by part (recall@10 measured), save it in ``out_dir``."""
    first = next(store.parts()).gallery
    index = GalleryIndex.build_streaming(
        store.index_chunks(),
        geometry=first.retrieval_geometry,
        curvature=first.curvature,
        generation=generation,
        config=index_config(p),
        compatible_generations=compatible,
    )
    index.save(out_dir)
    return index


def check_index_recall(p: Params, index: GalleryIndex, where: Path) -> None:
    """Refuse to publish a live index whose measured recall@10 is below ``index.min_recall``."""
    floor, recall = p.index.min_recall, index.manifest.recall_at_10
    if floor is not None and recall is not None and recall < floor:
        raise ConfigError(
            f"the {index.manifest.index_type} index in {where} reaches recall@10 {recall:.3f} against exact search, "
            f"below index.min_recall {floor}; raise index.nprobe / index.ef_search, or use index.type flat"
        )


def corpus_metrics(p: Params, store: GalleryStore, index: GalleryIndex, *, seed: int = 0) -> dict[str, float]:
    """Retrieval quality of a labelled corpus: exact leave-one-out (≤ evaluation.exact_max_items items) or top-k from
    its index on ``gallery.metric_queries`` sampled items. Unlabelled corpora have none ({})."""
    labels = store.column("labels")
    if (labels < 0).any():
        return {}
    ks = p.evaluation.cmc_k
    if len(store) <= p.evaluation.exact_max_items:
        whole = store.load_all().gallery
        vecs = whole.vectors()
        res = retrieval_metrics(
            vecs, whole.labels, whole.ids, vecs, whole.labels, whole.ids, whole.retrieval_geometry, whole.curvature, ks
        )
        return {f"corpus/{k}": float(v) for k, v in res.items() if k != "n_queries"}
    ids = store.column("ids")
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(store), size=min(p.gallery.metric_queries, len(store)), replace=False))
    queries, q_ids, q_labels, start = [], [], [], 0
    for part in store.parts():
        n = len(part)
        rows = pick[(pick >= start) & (pick < start + n)] - start
        if rows.size:
            queries.append(part.gallery.vectors()[rows])
            q_ids.append(part.gallery.ids[rows])
            q_labels.append(part.gallery.labels[rows])
        start += n
    from components.evaluation.topk import topk_metrics

    k = max(max(ks), 100) + 1
    _, found = index.search(np.concatenate(queries), k)
    res = topk_metrics(found, np.concatenate(q_ids), np.concatenate(q_labels), ids, labels, ks=tuple(ks))
    return {f"corpus/{key}": float(v) for key, v in res.items() if key != "n_queries"}
