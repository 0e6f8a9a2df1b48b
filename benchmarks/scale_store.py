"""What ``bctflow bench scale --store faiss|milvus|lancedb`` measures of the gallery store (docs/design.md §8.4).

The same corpus and the same model for every store: params ``gallery.store`` names it, a Milvus Lite file
(``milvus.db``) or a LanceDB folder (``lance``) in the benchmark workspace, ``--index`` mapped to the store's own
index type (:func:`store_gallery`). Measured here, in the benchmark process, between the ``bctflow`` children (a
Milvus Lite file serves one process at a time: :func:`measure_store` closes it before it returns):

* :func:`search_speed` — queries/s of the store's index (its own search path, re-scoring included) and of an exact
  FAISS flat index over the same vectors, on the same queries, k = 10;
* :func:`cosine_index` — the same index type over the corpus's cosine space (each item's spatial coordinates,
  unit-normalised), built by the same store: recall@10 (its manifest) and queries/s against flat;
* :func:`alias_flip` — the store's live-alias move (:meth:`~components.indexing.backend.Collection.point_alias`)
  to the previous version and back, the median single move (its work does not read the rows: the holder's
  description and the state its build recorded);
* :func:`switch_check` — what a switch to a gallery version checks before it moves anything (the rollback's gate: the
  version's seal, :mod:`components.indexing.seal`), the median check, and whether it showed the version unchanged;
* :func:`ingest_rate` — rows written into the store per second during its build (a database store's own
  ``write_seconds``; FAISS files: items over the index build).
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from components.errors import ConfigError
from components.geometry import Euclidean, Space
from components.geometry.space import unit_rows
from components.indexing.backend import IndexOptions, SearchIndex, collection_at, open_index
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.parts import GalleryParts, PartWriter, StoredPart
from components.indexing.seal import read_seal, unsealed
from components.indexing.stores.faiss import GalleryIndex, IndexConfig
from components.indexing.version import GalleryVersion

__all__ = [
    "alias_flip",
    "cosine_index",
    "ingest_rate",
    "queries_per_s",
    "search_speed",
    "store_gallery",
    "switch_check",
]

#: a database store's address in the benchmark workspace (relative: the workspace's)
URIS = {"milvus": "milvus.db", "lancedb": "lance"}
#: ``--index`` as each database store's own index type
_TYPES = {
    "milvus": {"flat": "FLAT", "ivf": "IVF_FLAT", "hnsw": "HNSW"},
    "lancedb": {"flat": "FLAT", "ivf": "IVF_FLAT", "hnsw": "IVF_HNSW_SQ", "ivfpq": "IVF_PQ"},
}
#: the collection prefix of the benchmark's galleries
NAME = "scale"


def store_gallery(store: str, index_type: str) -> dict[str, Any]:
    """params ``gallery:`` keys for ``store``: its name, URI and index options (``--index`` as its own type).
    ConfigError, one line, for an index type the store does not build."""
    if store not in _TYPES:
        return {"store": store}
    kind = _TYPES[store].get(index_type)
    if kind is None:
        raise ConfigError(
            f"bench scale --store {store} has no {index_type} index; use --index {' or '.join(_TYPES[store])}"
        )
    return {"store": store, "uri": URIS[store], "name": NAME, "index_options": {"index_type": kind}}


def queries_per_s(index: SearchIndex, q: np.ndarray) -> float:
    """Queries/s of one search of ``q`` (n, D), k = 10, after a warm-up of ten."""
    index.search(q[:10], 10)  # warm-up
    t0 = time.perf_counter()
    index.search(q, 10)
    return len(q) / (time.perf_counter() - t0)


def _flat(chunks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]], space: Space) -> Any:
    return GalleryIndex.build_streaming(chunks, space=space, generation=0, config=IndexConfig(type="flat"))


def search_speed(index_dir: Path, parts: GalleryParts, queries: int = 2000) -> dict[str, float]:
    """Queries/s of the index attached in ``index_dir`` (opened by its store) and of an exact flat index over the
    same vectors, on the same ``queries`` corpus items, k = 10."""
    index = open_index(index_dir)
    first = next(parts.parts()).gallery
    q = first.vectors()[:queries]
    flat = _flat(parts.index_chunks(), first.retrieval_space)
    return {"search_qps": queries_per_s(index, q), "flat_search_qps": queries_per_s(flat, q)}


def _unit_space(vectors: np.ndarray, space: Space) -> np.ndarray:
    """Points (n, D) of ``space`` → (n, d) unit vectors: their directions in the tangent space (:meth:`Space.to_tangent
    <components.geometry.space.Space.to_tangent>`; for hyperboloid points, time first, the direction of the spatial
    coordinates): the corpus as a cosine gallery."""
    return unit_rows(space.to_tangent(vectors))


def _cosine_parts(parts: GalleryParts, folder: Path) -> GalleryParts:
    """The corpus's cosine space as a part store of unit vectors (a cosine corpus as it is), written afresh."""
    shutil.rmtree(folder, ignore_errors=True)  # an earlier run's parts would be kept by the writer
    writer = PartWriter(folder, chunk_size=max(len(p) for p in parts.parts()))
    for part in parts.parts():
        g = part.gallery
        unit = _unit_space(g.vectors(), g.retrieval_space).astype(np.float32)
        rows = GalleryEmbeddings(Euclidean.name, 1.0, unit, unit, g.ids, g.labels, g.clipped, g.logits)
        writer.add(StoredPart(rows, part.stamps))
    return writer.finish()


def cosine_index(index_dir: Path, parts: GalleryParts, options: IndexOptions, work: Path) -> dict[str, float]:
    """The same index type over the corpus's cosine space, built by the store that built ``index_dir`` (collection
    ``scale_cos_g0_v0``): recall@10 (its manifest), build seconds, and queries/s against flat, on 2000 corpus items."""
    cosine = _cosine_parts(parts, work / "cosine" / "gallery")
    collection = collection_at(index_dir).store.collection(f"{NAME}_cos_g0_v0", work / "cosine" / "index")
    built = collection.build(cosine, generation=0, options=options)
    q = next(cosine.parts()).gallery.vectors()[:2000]
    res = {
        "cosine_recall_at_10": built.manifest.recall_at_10,
        "cosine_index_build_s": built.manifest.build_seconds,
        "cosine_search_qps": queries_per_s(built, q),
        "cosine_flat_search_qps": queries_per_s(_flat(cosine.index_chunks(), Euclidean()), q),
    }
    collection.drop()  # the store holds only the workspace's
    return res


def alias_flip(live: Path, previous: Path, generations: list[int], rounds: int = 5) -> float | None:
    """Median seconds of one move of the store's live alias (:meth:`Collection.point_alias`), from the version
    attached in ``live`` to ``previous`` and back, ``rounds`` times; it ends where it was. None for a store whose
    alias is ``live/CURRENT`` itself (FAISS files: nothing of the store's own to move)."""
    now, before = collection_at(live), collection_at(previous)
    if now.store.name == "faiss":
        return None
    moves = []
    for _ in range(rounds):
        for target in (before, now):
            t0 = time.perf_counter()
            target.point_alias(generations)
            moves.append(time.perf_counter() - t0)
    assert now.aliased()
    return statistics.median(moves)


def switch_check(version: Path, rounds: int = 5) -> dict[str, Any]:
    """What a switch to the gallery version in the folder ``version`` (``live/index-v<k>``, ``generations/gen_NNN``)
    checks before it moves anything: :func:`~components.indexing.seal.unsealed` against the seal's own sha256, as the
    lineage pins it (the rollback's gate). ``switch_check_s``: the median seconds of ``rounds`` checks;
    ``switch_check_files``: the files and folders it stats (each part store's ``parts/`` folder as one: their number
    does not grow with the gallery); ``switch_check_sealed``: whether it showed the version unchanged (False: a rollback
    to it verifies it in full, and its seconds grow with the gallery)."""
    v = GalleryVersion(version)
    seal, pinned = read_seal(v)
    seconds, why = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        why = unsealed(v, pinned)
        seconds.append(time.perf_counter() - t0)
    return {
        "switch_check_s": statistics.median(seconds),
        "switch_check_files": len(seal.files),
        "switch_check_sealed": why is None,
    }


def ingest_rate(manifest: dict[str, Any]) -> float:
    """Rows written into the store per second during the build of the index whose ``manifest.json`` is
    ``manifest``: a database store's own write timing (``extra``), FAISS files' items over the build."""
    extra = manifest.get("extra") or {}
    if "write_seconds" in extra:
        return extra["rows_written"] / extra["write_seconds"]
    return manifest["count"] / manifest["build_seconds"]
