"""What ``bctflow serve`` answers over a partially backfilled gallery: the served mAP@R of a mixed gallery.

A partial backfill re-embeds some of the gallery's items with a newer generation and keeps the rest. :func:`backfilled`
makes that gallery from the old and the new generation's embeddings of the same items; :func:`served_maps` measures
what the query service answers over it, with the new generation's queries (``serve.merge: none``) or each
generation's vectors searched with its own query and the lists merged by rank (``serve.merge: rank``). The
partial-backfill benchmark draws its curves with them, and the backfill plan predicts each 10% with them.
"""

from __future__ import annotations

import numpy as np

from components.evaluation.topk import topk_metrics
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.mixed import merge_by_rank, mix_galleries

__all__ = ["MERGES", "SERVED_QUERIES", "backfilled", "served_maps"]

#: queries of the served-mAP measurement (each ranks the whole gallery, once per generation under ``rank``)
SERVED_QUERIES = 2000
#: params ``serve.merge`` → the key :func:`served_maps` measures it under
MERGES = {"none": "served_map", "rank": "served_map_rank"}


def backfilled(old: GalleryEmbeddings, new: GalleryEmbeddings, pos: np.ndarray) -> GalleryEmbeddings:
    """``old``'s gallery with the items at ``pos`` (sorted positions) replaced by ``new``'s rows of them: the gallery
    a partial backfill of those items leaves (``old`` and ``new`` embed the same items in the same order)."""
    return mix_galleries(old, new.take(pos), pos)


def served_maps(
    old: GalleryEmbeddings,
    new: GalleryEmbeddings,
    mixed: GalleryEmbeddings,
    pos: np.ndarray,
    merges: tuple[str, ...] = tuple(MERGES),
) -> dict[str, float]:
    """mAP@R of what ``bctflow serve`` answers over the mixed gallery (items at ``pos`` re-embedded by ``new``), for
    each of ``merges`` (params ``serve.merge``; keys :data:`MERGES`): ``served_map``, new queries over every vector
    (``none``); ``served_map_rank``, each generation's vectors ranked by its own query and the lists merged by rank
    (``rank``). Full-depth lists, the first :data:`SERVED_QUERIES` queries, leave-one-out."""
    space = mixed.retrieval_space
    nq = min(len(new), SERVED_QUERIES)
    gallery, ids = mixed.vectors(), mixed.ids
    s_new = space.scores(new.vectors_against(mixed)[:nq], gallery)

    def map_r(neighbours: np.ndarray) -> float:
        return topk_metrics(neighbours, new.ids[:nq], new.labels[:nq], ids, mixed.labels, ks=(1,))["map@R"]

    out = {}
    if "none" in merges:
        out[MERGES["none"]] = map_r(ids[np.argsort(-s_new, axis=1, kind="stable")])
    if "rank" in merges:
        is_new = np.zeros(len(mixed), dtype=bool)
        is_new[pos] = True
        s_old = space.scores(old.vectors_against(mixed)[:nq], gallery)
        merged = np.empty((nq, len(ids)), dtype=ids.dtype)
        for i in range(nq):
            lists = []
            for scores, own in ((s_new[i], is_new), (s_old[i], ~is_new)):
                rows = np.flatnonzero(own)
                rows = rows[np.argsort(-scores[rows], kind="stable")]
                lists.append((scores[rows], ids[rows]))
            merged[i] = merge_by_rank(lists, len(ids))[1]
        out[MERGES["rank"]] = map_r(merged)
    return out
