"""Served quality on the labelled evaluation split: what production's queries get from the live gallery, and what
each action would give (docs/design.md §7.18, §11).

One measure for every forecast and every outcome: mAP@all of queries embedded by a generation (the evaluation
split, leave-one-out; ``serve.merge: none``: one query over every stored vector, whatever generation embedded it)
against a gallery as the live version holds it — mixed after a partial backfill. The keep / promote / partial /
full forecasts and the night's outcome are this function of different galleries and queries, so a forecast and its
outcome compare like with like.
"""

from __future__ import annotations

import numpy as np

from components.evaluation.retrieval import gallery_metrics
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.mixed import mix_galleries
from components.indexing.reader import PartReader
from components.indexing.version import GalleryVersion
from flows.params import Params
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB

__all__ = ["live_evaluation", "own_evaluation", "partial_gallery", "served_map"]


def served_map(params: Params, queries: GalleryEmbeddings, gallery: GalleryEmbeddings) -> float:
    """mAP@all of ``queries`` (a generation's embeddings of the evaluation split) over ``gallery`` (the same items as
    a gallery holds them), leave-one-out; 0 when the queries cannot search that gallery (another width or space)."""
    if queries.incompatibility(gallery) is not None:
        return 0.0
    return float(gallery_metrics(queries, gallery, (1,), params.evaluation.chunk_size)["map"])


def own_evaluation(ws: Workspace, generation: int) -> GalleryEmbeddings:
    """Generation ``generation``'s own embeddings of the evaluation split (its generation folder's gallery)."""
    return PartReader(GalleryVersion(ws.generation_dir(generation)).evaluation_store).embeddings()


def live_evaluation(store: LineageDB) -> tuple[PartReader, GalleryEmbeddings]:
    """The live version's evaluation gallery: its part store (stamps, order) and its rows in memory."""
    ptr = store.live_pointer()
    assert ptr is not None  # a lifecycle night runs after generation 0
    parts = PartReader(GalleryVersion.of_index(ptr.index_path).evaluation_gallery())
    return parts, parts.embeddings()


def partial_gallery(live: PartReader, rows: GalleryEmbeddings, new: GalleryEmbeddings, target: int,
                    fraction: float, order: str, seed: int) -> tuple[GalleryEmbeddings, int]:  # fmt: skip
    """The live evaluation gallery after a partial backfill leaves ``fraction`` of it embedded by generation
    ``target`` (``new``: its embeddings of the same items): the rows already stamped ``target`` stay, the others are
    replaced in the backfill's ``order`` until the share is reached. Returns (that gallery, the items re-embedded)."""
    have = int(live.rows.stamped(target).sum())
    todo = live.selection(order, seed, skip=target)[: max(0, round(fraction * len(live)) - have)]
    pos = np.sort(todo)
    return (mix_galleries(rows, new.take(pos), pos) if len(pos) else rows), len(pos)
