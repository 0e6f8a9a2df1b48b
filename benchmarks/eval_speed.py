"""Speed of exact retrieval evaluation against a plain float32 matmul of the same scores (docs/design.md §6.1).

``python -m benchmarks.eval_speed`` prints the numbers for 10k x 10k x 128 in both geometries.
"""

from __future__ import annotations

import time

import numpy as np

from components.evaluation import retrieval_metrics
from components.geometry import Euclidean, Space, create_space, list_spaces

__all__ = ["measure_exact_eval"]


def _embeddings(
    n: int, d: int, classes: int, seed: int, space: Space
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(queries, gallery, labels, ids)``: the same n items embedded by two "models", points of ``space`` (n, D)
    float64 each.

    Gallery rows are a class centre plus noise, query rows the gallery row plus more noise (another
    model's view of the same item, same id), put in the space (:meth:`Space.from_tangent
    <components.geometry.space.Space.from_tangent>`): unit vectors (n, d), or hyperboloid points (n, d+1), time
    first, from ``expmap0`` of those tangent vectors scaled to a typical radius.
    """
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    centres = rng.normal(size=(classes, d))
    gallery = centres[labels] + rng.normal(size=(n, d))
    queries = gallery + 0.5 * rng.normal(size=(n, d))
    scale = 2.0 / np.sqrt(2.0 * d)  # tangent norms around 2
    gallery, queries = space.from_tangent(gallery * scale), space.from_tangent(queries * scale)
    return queries, gallery, labels, np.arange(n, dtype=np.int64)


def measure_exact_eval(
    n: int = 10000, d: int = 128, classes: int = 10, seed: int = 0, repeats: int = 3, *, space: Space | None = None
) -> dict:
    """Best-of-``repeats`` wall time of :func:`retrieval_metrics` (leave-one-out, ``n`` x ``n``) and of
    ``q32 @ g32.T`` for the same vectors in float32, interleaved in one run.

    Queries and gallery: points of ``space`` (default: Euclidean): (n, d) unit vectors or (n, d+1) hyperboloid
    points (lorentz). Returns ``{"n", "d", "eval_s", "matmul_s", "ratio"}`` with ``ratio = eval_s / matmul_s``.
    """
    space = space or Euclidean()
    queries, gallery, labels, ids = _embeddings(n, d, classes, seed, space)
    q32, g32 = queries.astype(np.float32), gallery.astype(np.float32)
    eval_s = matmul_s = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        _ = q32 @ g32.T
        matmul_s = min(matmul_s, time.perf_counter() - t0)
        t0 = time.perf_counter()
        retrieval_metrics(queries, labels, ids, gallery, labels, ids, space, leave_one_out=True)
        eval_s = min(eval_s, time.perf_counter() - t0)
    return {"n": n, "d": d, "eval_s": eval_s, "matmul_s": matmul_s, "ratio": eval_s / matmul_s}


if __name__ == "__main__":
    for name in list_spaces():
        print(name, measure_exact_eval(space=create_space(name)))
