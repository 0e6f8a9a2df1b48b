"""The test galleries the index tests share: the clustered one (Euclidean points and their lift to the hyperboloid)
and a small Lorentz gallery of given ids (:func:`lorentz_gallery`)."""

from __future__ import annotations

import itertools

import numpy as np

from components.indexing.gallery import GalleryEmbeddings

N, D, K = 3000, 16, 0.8
#: recall@10 each type must reach on the clustered test gallery with its default parameters
MIN_RECALL = {"flat": 1.0, "ivf": 0.95, "hnsw": 0.95, "ivfpq": 0.25, "ivfsq": 0.9}


def clustered(n: int, d: int, seed: int = 0) -> np.ndarray:
    """float64 (n, d): 40 Gaussian clusters whose spread makes the 10 nearest neighbours non-trivial."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, d))
    return centres[rng.integers(0, 40, n)] + 0.4 * rng.normal(size=(n, d))


def lift(v: np.ndarray, k: float = K) -> np.ndarray:
    """Tangent vectors (n, d) -> hyperboloid points (n, d+1), time first, radii spread over 0.3..2.5."""
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    r = 0.3 + 2.2 * (norm - norm.min()) / (norm.max() - norm.min())
    sk = np.sqrt(k)
    return np.concatenate([np.cosh(sk * r) / sk, np.sinh(sk * r) / sk * v / norm], axis=1)


def make_data() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per geometry: (gallery (N, ·), queries (200, ·), ids (N,)) of the clustered test gallery."""
    v = clustered(N + 200, D)
    ids = np.random.default_rng(7).choice(10**12, size=N, replace=False).astype(np.int64)
    return {"euclidean": (v[:N], v[N:], ids), "lorentz": (lift(v)[:N], lift(v)[N:], ids)}


def chunks_of(x: np.ndarray, ids: np.ndarray, sizes=(700, 0, 1100, 1200)):
    """A chunks() callable over uneven pieces, one of them empty; counts its calls."""
    bounds = np.cumsum((0, *sizes))
    assert bounds[-1] == len(x)

    def chunks():
        chunks.calls += 1
        return ((x[a:b], ids[a:b]) for a, b in itertools.pairwise(bounds))

    chunks.calls = 0
    return chunks


def lorentz_gallery(ids: np.ndarray, seed: int = 0, d: int = 4) -> GalleryEmbeddings:
    """A small Lorentz gallery of ``ids``: random tangent vectors z (n, d), labels id % 3, random logits."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(len(ids), d)).astype(np.float32)
    return GalleryEmbeddings(
        geometry="lorentz",
        curvature=1.0,
        z=z,
        emb=np.zeros((len(ids), d + 1), np.float32),
        ids=np.asarray(ids, np.int64),
        labels=np.asarray(ids, np.int64) % 3,
        clipped=np.zeros(len(ids), bool),
        logits=rng.normal(size=(len(ids), 3)).astype(np.float32),
    )
