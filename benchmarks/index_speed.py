"""Speed and recall of an approximate gallery index against the exact flat index, measured in one run.

:func:`measure_index` builds the index a :class:`~components.indexing.IndexConfig` asks
for and the exact flat index over the same chunks, then times both on the same
queries (``GalleryIndex.search``: one FAISS call plus float64 re-scoring) and
measures recall@10 of the approximate ids against the exact ones (docs/design.md §8.3).
:func:`clustered_gallery` makes a synthetic clustered gallery, chunk by chunk, in
either geometry. Run as a script for the 200k-item check::

    python -m benchmarks.index_speed --n 200000 --types ivf hnsw --out /tmp/index_speed.json

``--out`` gets the rows with the command and the run's provenance (code, machine, library versions).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from components.geometry import Space, create_space, list_spaces
from components.indexing.stores.faiss import GalleryIndex, IndexConfig
from components.io import atomic_write_text
from flows.runtime import describe_run

__all__ = ["clustered_gallery", "measure_index"]

Chunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


def _timed_searches(indexes: list[GalleryIndex], queries: np.ndarray, k: int, repeats: int) -> list:
    """[(ids (nq, k), best queries/s)] per index; the indexes take turns, so load changes hit them alike."""
    best, found = [math.inf] * len(indexes), [None] * len(indexes)
    for _ in range(repeats):
        for j, index in enumerate(indexes):
            t = time.perf_counter()
            _, found[j] = index.search(queries, k)
            best[j] = min(best[j], time.perf_counter() - t)
    return [(ids, len(queries) / b) for ids, b in zip(found, best)]


def measure_index(
    vectors_chunks: Chunks,
    space: Space,
    config: IndexConfig,
    queries: np.ndarray,
    *,
    k: int = 10,
    repeats: int = 5,
) -> dict[str, Any]:
    """Build ``config``'s index and the flat index over ``vectors_chunks()``; time and compare them on ``queries``.

    ``vectors_chunks``: as :meth:`GalleryIndex.build_streaming` takes it (vectors (n, D)
    in retrieval space, int ids (n,)); ``queries`` (nq, D) not in the gallery. Returns
    build_s / flat_build_s (wall seconds), qps / flat_qps (best of ``repeats`` searches
    of all queries, k neighbours, the two indexes taking turns), qps_ratio, recall_at_10 (mean share of the flat
    top-``k`` that the index finds), and the index's own build-time record:
    manifest_recall_at_10 / manifest_search_qps (held-out gallery items), factory, params.
    """
    build = dict(space=space, generation=0)
    t = time.perf_counter()
    index = GalleryIndex.build_streaming(vectors_chunks, config=config, **build)
    build_s = time.perf_counter() - t
    t = time.perf_counter()
    flat = GalleryIndex.build_streaming(
        vectors_chunks, config=IndexConfig(recall_queries=config.recall_queries), **build
    )
    flat_build_s = time.perf_counter() - t
    (found, qps), (exact, flat_qps) = _timed_searches([index, flat], queries, k, repeats)
    recall = float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, exact)]))
    m = index.manifest
    return {
        "type": config.type,
        "geometry": space.name,
        "n": m.count,
        "dim": m.dim,
        "queries": len(queries),
        "threads": faiss.omp_get_max_threads(),
        "factory": m.factory,
        "params": m.params,
        "build_s": round(build_s, 3),
        "flat_build_s": round(flat_build_s, 3),
        "recall_at_10": round(recall, 4),
        "qps": round(qps, 1),
        "flat_qps": round(flat_qps, 1),
        "qps_ratio": round(qps / flat_qps, 2),
        "manifest_recall_at_10": m.recall_at_10,
        "manifest_search_qps": round(m.search_qps, 1),
        "flat_manifest_search_qps": round(flat.manifest.search_qps, 1),
    }


def clustered_source(
    d: int,
    space: Space,
    *,
    clusters: int = 1000,
    intrinsic: int = 16,
    median_norm: float = 1.5,
    max_norm: float = 3.0,
    seed: int = 0,
) -> Callable[[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A synthetic clustered, labelled source of points of ``space``: ``make(count, part)`` → (labels (count,)
    int64, tangent vectors z (count, d) float64, points (count, D) float64), the same for the same ``part``.

    Each cluster has a random centre in R^d (norm scaled per cluster by U(0.3, 1)) and spreads mostly within its own
    random ``intrinsic``-dimensional subspace, plus a little isotropic noise. euclidean: the points are the vectors
    unit-normalised (cosine retrieval). lorentz: the vectors scaled to a median tangent norm of ``median_norm``,
    clipped at ``max_norm`` (ζ) and lifted by expmap0 (HBCT Eq. (5)) to (d+1) hyperboloid points, so hyperbolic
    radii — and Euclidean norms — vary widely."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, d)) * rng.uniform(0.3, 1.0, size=(clusters, 1))
    bases = rng.normal(size=(clusters, intrinsic, d)) / np.sqrt(d)

    def raw(count: int, part: int) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng([seed, part + 1])
        label = r.integers(0, clusters, count)
        v = centres[label] + 1.5 * np.einsum("ni,nid->nd", r.normal(size=(count, intrinsic)), bases[label])
        return label, v + 0.15 * r.normal(size=(count, d))

    scale = median_norm / float(np.median(np.linalg.norm(raw(2000, -1)[1], axis=1)))

    def make(count: int, part: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        label, v = raw(count, part)
        z = v * scale
        z *= np.minimum(1.0, max_norm / np.linalg.norm(z, axis=1, keepdims=True))
        return label.astype(np.int64), z, space.points(z, v)

    return make


def clustered_gallery(
    n: int,
    d: int,
    space: Space,
    *,
    clusters: int = 1000,
    intrinsic: int = 16,
    chunk: int = 50_000,
    n_queries: int = 1000,
    seed: int = 0,
) -> tuple[Chunks, np.ndarray]:
    """A synthetic clustered gallery of ``n`` items and ``n_queries`` held-out queries from the same clusters
    (:func:`clustered_source`: median tangent norm 1.5, clipped at 3). Returns (chunks callable yielding (vectors,
    ids) of ``chunk`` rows, generated on the fly; queries (n_queries, D))."""
    make = clustered_source(d, space, clusters=clusters, intrinsic=intrinsic, seed=seed)

    def chunks() -> Iterable[tuple[np.ndarray, np.ndarray]]:
        for i, start in enumerate(range(0, n, chunk)):
            count = min(chunk, n - start)
            yield make(count, i + 1)[2], np.arange(start, start + count, dtype=np.int64)

    return chunks, make(n_queries, 0)[2]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """CLI: measure the given types on clustered galleries of both geometries; print (and save) JSON rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--d", type=int, default=128, help="euclidean width; lorentz points have d+1 coordinates")
    ap.add_argument("--types", nargs="+", default=["ivf", "hnsw"])
    ap.add_argument("--geometries", nargs="+", default=list_spaces(), choices=list_spaces())
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--set", nargs="*", default=[], help="IndexConfig overrides, e.g. nprobe=8 lorentz_form=mips_l2")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    overrides = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in (s.split("=", 1) for s in args.set)}
    rows = []
    for geometry in args.geometries:
        space = create_space(geometry)
        chunks, queries = clustered_gallery(args.n, args.d, space, n_queries=args.queries)
        for index_type in args.types:
            row = measure_index(chunks, space, IndexConfig(type=index_type, **overrides), queries)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        command = "python -m benchmarks.index_speed " + " ".join(argv if argv is not None else sys.argv[1:])
        doc = {"command": command, "provenance": describe_run(), "rows": rows}
        atomic_write_text(Path(args.out), json.dumps(doc, indent=2))
    return rows


if __name__ == "__main__":
    main()
