"""The queries the service answers: checked request values in, ranked hits out (no HTTP here).

Every refusal is a :class:`QueryError` with the HTTP status it deserves and one line naming the problem and the fix:
a vector of the wrong width, with NaN/inf, with a norm the search would overflow (or an all-zero one), or off its
generation's hyperboloid, an unknown generation (422), a generation whose queries the live gallery cannot serve and no
query adapter carries (409, the lineage's compatibility and bridges), a bad ``k``, a file that is not an image. A bad
vector is refused alone: it never reaches (or fails) the FAISS call its batch shares. Answering runs one batch of
queries against one :class:`~flows.serving.version.ServedVersion`: image queries are embedded in one forward pass
(``torch.inference_mode``), vectors searched in one FAISS call; with ``serve.merge: rank`` a mixed gallery is searched
per generation, each with its own query, and the lists merged by rank (:func:`components.indexing.mixed.merge_by_rank`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.indexing.mixed import merge_by_rank
from components.indexing.vectors import HYPERBOLOID_RTOL, hyperboloid_rel_error
from flows.serving.version import ServedVersion

__all__ = [
    "EmbeddedImages",
    "ImageQuery",
    "QueryError",
    "VectorQuery",
    "answer_vectors",
    "check_k",
    "decode_query",
    "embed_images",
    "search_images",
]


class QueryError(Exception):
    """A refused query: ``status`` (4xx) and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class VectorQuery:
    vector: np.ndarray  # (D,) float64, checked
    generation: int
    k: int


@dataclass(frozen=True)
class ImageQuery:
    data: bytes  # the image file's bytes: decoded in the batch's thread (one thread hop per batch, not per query)
    k: int


def check_k(k: Any, max_k: int) -> int:
    """``k`` as an int in 1..max_k, else QueryError 422."""
    if isinstance(k, bool) or not isinstance(k, int):
        try:
            k = int(str(k)) if isinstance(k, str) else None
        except ValueError:
            k = None
        if k is None:
            raise QueryError(422, f"k must be a whole number from 1 to {max_k}; pass e.g. k=10")
    if not 1 <= k <= max_k:
        raise QueryError(422, f"k={k} is out of range: ask for 1 to {max_k} neighbours (serve.max_k)")
    return k


_NUMBERS = {int, float}  # the JSON numbers' types (bool is not one: a subclass of int, its own type here)
#: the largest query norm searched: FAISS ranks float32 rows, and a Lorentz query is searched as it is (not normalised),
#: so its inner products with the gallery's rows stay finite in float32 only below sqrt(float32 max) ≈ 1.8e19
MAX_NORM = math.sqrt(float(np.finfo(np.float32).max))
#: the smallest: below sqrt(float64's smallest normal) ≈ 1.5e-154 the squares underflow, the norm the index divides
#: by (euclidean) comes out 0
MIN_NORM = math.sqrt(float(np.finfo(np.float64).tiny))
_FIX = "send the embedding as the model produced it"


def check_vector_query(version: ServedVersion, vector: Any, generation: Any, k: int) -> VectorQuery:
    """A vector query checked against the live version: known generation, compatible, right width, finite, with a
    norm the search can take (:data:`MIN_NORM` to :data:`MAX_NORM`); checked before it joins a batch."""
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise QueryError(422, "a vector query needs `generation`: the id of the generation that embedded it")
    facts = version.facts
    if generation not in facts.known:
        raise QueryError(
            422, f"generation {generation} is not in the lineage (it has {list(facts.known)}); `bctflow lineage`"
        )
    if generation not in facts.compatible and generation not in version.adapters:
        fix = f"query with generation {version.query_generation}'s model"
        if generation > facts.generation:  # a newer model: its backfill would make the gallery serve it
            fix = (
                f"backfill the gallery with generation {generation}, fit a query adapter (bctflow upgrade "
                f"--generation {generation} --route adapter), or {fix}"
            )
        raise QueryError(
            409,
            f"generation {generation}'s vectors cannot search the live gallery (embedded by generation "
            f"{facts.generation}; it serves the queries of generations {list(facts.compatible)}): {fix}",
        )
    if not isinstance(vector, list) or not set(map(type, vector)) <= _NUMBERS:
        raise QueryError(422, "`vector` must be a JSON list of numbers (the query's embedding)")
    if len(vector) != version.index.dim:
        raise QueryError(
            422, f"the vector has {len(vector)} values but the live gallery holds {version.index.dim}-wide vectors"
        )
    try:
        v = np.asarray(vector, dtype=np.float64)
    except OverflowError:  # a JSON integer beyond float64 (the standard parser reads any size)
        raise QueryError(422, f"the vector's values are too large: one overflows float64; {_FIX}") from None
    _check_norm(v)
    return VectorQuery(v, generation, k)


def _check_norm(v: np.ndarray) -> None:
    """QueryError 422 unless the vector ``v`` (D,) is finite with a norm in :data:`MIN_NORM` … :data:`MAX_NORM`."""
    if not np.isfinite(v).all():
        raise QueryError(422, "the vector holds NaN or infinite values; send the finite embedding")
    with np.errstate(over="ignore", under="ignore"):
        sq = float(v @ v)  # inf past a norm of ~1.3e154; 0 when every square underflows
    if not sq <= MAX_NORM * MAX_NORM:
        norm = "overflows float64" if math.isinf(sq) else f"is {math.sqrt(sq):.3g}"
        raise QueryError(
            422, f"the vector's values are too large: its norm {norm} (the index's float32 search takes norms up to "
            f"{MAX_NORM:.2g}); {_FIX}"
        )  # fmt: skip
    if sq < MIN_NORM * MIN_NORM:
        raise QueryError(
            422, f"the vector is all zeros or its values are too small (norm below {MIN_NORM:.2g}): it has no "
            f"direction to search by; {_FIX}"
        )  # fmt: skip


def decode_query(data: bytes, version: ServedVersion, max_pixels: int) -> np.ndarray:
    """Image bytes (PNG, JPEG, … or a uint8 ``.npy``) decoded and resized as the gallery's sources are, (H, W, C);
    its size (and a ``.npy``'s channels) checked from the header, before the pixels are decoded."""
    from components.data.sources.decode import decode_image, resize_uint8
    from components.errors import DataError

    if not data:
        raise QueryError(422, "the request body is empty; send the query image's bytes (PNG, JPEG, …)")

    def check(channels: int, h: int, w: int, npy: bool) -> None:
        if h * w > max_pixels:
            raise QueryError(
                413, f"the query image is {w}×{h} pixels, more than serve.max_pixels ({max_pixels}); send it smaller"
            )
        if npy and channels != version.channels:
            raise QueryError(
                422, f"the query array has {channels} channel(s) but the model takes {version.channels}; convert it"
            )

    hint = "send a PNG, JPEG, BMP, WebP or uint8 .npy image"
    try:
        img = decode_image(data, channels=version.channels, name="the query", hint=hint, check=check)
    except DataError as err:
        raise QueryError(415, str(err)) from None
    img = resize_uint8(img[None], version.image_size)[0]
    return img.permute(1, 2, 0).numpy()


def _hits(version: ServedVersion, scores: np.ndarray, ids: np.ndarray, query_gen: int | list[int]) -> dict[str, Any]:
    keep = ids >= 0
    s, d = scores[keep], ids[keep]
    hits = {
        "ids": d.tolist(),
        "scores": [float(x) if math.isfinite(x) else None for x in s],
        "generations": version.stamps_of(d).tolist(),
        "query_generation": query_gen,
        "answered_by": version.describe(),
    }
    carried = version.carried_by(d)
    if carried is not None:  # a gallery transform's rows: the map that carried each stored vector, with its sha256
        hits["carried_by"] = carried
    if isinstance(query_gen, int) and query_gen in version.adapters:
        hits["query_route"] = version.route(query_gen)  # the adapters that carried the query, each map's sha256
    return hits


def _adapted(version: ServedVersion, vectors: np.ndarray, gen: int) -> np.ndarray:
    """(N, D) queries of generation ``gen`` as the gallery searches them: through its adapter chain when it has one
    (a few matrix products, :meth:`components.bridges.chain.BridgeChain.map_queries`)."""
    chain = version.adapters.get(gen)
    return vectors if chain is None else chain.map_queries(vectors)


def _misfits(vectors: np.ndarray, geometry: str, curvature: float) -> np.ndarray:
    """Which rows (N, D) are not retrieval vectors of ``geometry`` the search can take (bool (N,)): NaN/inf, a norm
    outside :data:`MIN_NORM` … :data:`MAX_NORM`, a point off the K-hyperboloid or with its time coordinate not first
    and positive (lorentz) — rows that would fail (or overflow) the FAISS call every query of the batch shares."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        sq = np.einsum("ij,ij->i", vectors, vectors)
        bad = ~np.isfinite(vectors).all(axis=1) | ~((sq >= MIN_NORM * MIN_NORM) & (sq <= MAX_NORM * MAX_NORM))
        if geometry == "lorentz":
            bad |= ~(hyperboloid_rel_error(vectors, curvature) <= HYPERBOLOID_RTOL)
    return bad


def _space(version: ServedVersion, gen: int) -> tuple[str, float]:
    """(geometry, curvature) of generation ``gen``'s query vectors as they are sent: its adapter chain's source, or
    the live gallery's."""
    chain = version.adapters.get(gen)
    if chain is not None:
        return chain.links[0].geometry, chain.links[0].source_curvature
    m = version.index.manifest
    return m.geometry, m.curvature


def _off_space(vector: np.ndarray, gen: int, geometry: str, curvature: float) -> QueryError:
    """The refusal of a row :func:`_misfits` found: its norm's, or else its geometry's."""
    try:
        _check_norm(vector)
    except QueryError as err:
        return err
    if geometry == "lorentz":
        where = f"on generation {gen}'s hyperboloid <x,x>_L = -1/K (K={curvature:g}, time coordinate first and > 0)"
    else:
        where = f"a direction in generation {gen}'s space"
    return QueryError(422, f"the vector is not a point {where}; {_FIX}")


def answer_vectors(version: ServedVersion, queries: list[VectorQuery]) -> list[dict[str, Any] | QueryError]:
    """Checked vector queries of one version, searched one FAISS call per query generation (a generation the
    gallery does not serve as it is: its queries carried by its adapter chain first). A vector that is not a point of
    its generation's space (off the hyperboloid), or that its adapter chain carries out of the gallery's, gets its own
    422 and the others of its batch are searched."""
    out: list[dict[str, Any] | QueryError | None] = [None] * len(queries)
    m = version.index.manifest
    for gen in {q.generation for q in queries}:
        rows = [i for i, q in enumerate(queries) if q.generation == gen]
        vectors = np.stack([queries[i].vector for i in rows])
        bad = _misfits(vectors, *_space(version, gen))  # as sent
        for j in np.flatnonzero(bad):
            out[rows[j]] = _off_space(vectors[j], gen, *_space(version, gen))
        rows = [i for i, b in zip(rows, bad) if not b]
        if not rows:
            continue
        vectors = _adapted(version, vectors[~bad], gen)
        if gen in version.adapters:  # as the chain carried them into the gallery's space
            bad = _misfits(vectors, m.geometry, m.curvature)
            for j in np.flatnonzero(bad):
                out[rows[j]] = QueryError(
                    422, f"generation {gen}'s query adapters carry the vector out of the live gallery's space; {_FIX}"
                )
            rows, vectors = [i for i, b in zip(rows, bad) if not b], vectors[~bad]
            if not rows:
                continue
        k = max(queries[i].k for i in rows)
        scores, ids = version.index.search(vectors, k, query_generation=version.searches_as(gen))
        for j, i in enumerate(rows):
            out[i] = _hits(version, scores[j, : queries[i].k], ids[j, : queries[i].k], gen)
    return out  # type: ignore[return-value]


def _embed(version: ServedVersion, images: np.ndarray, gen: int, *, adapt: bool) -> np.ndarray:
    """(B, H, W, C) uint8 images → (B, D) generation ``gen``'s queries; with ``adapt``, carried by its adapter chain
    (a merge searches each generation's own vectors with its own, unadapted query)."""
    import torch

    with torch.inference_mode():
        x = torch.from_numpy(images).to(version.device)
        q = version.embedders[gen](x).cpu().numpy().astype(np.float64)
    return _adapted(version, q, gen) if adapt else q


def _own_lists(version: ServedVersion, q: np.ndarray, gen: int, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each query's top-k among the vectors stamped ``gen`` (searched deeper until k are found or none are left)."""
    n, total = int((version.stamps == gen).sum()), version.index.ntotal
    depth = min(total, max(k, 1) * max(1, math.ceil(total / max(n, 1))))
    while True:
        scores, ids = version.index.search(q, depth, query_generation=None)
        own = version.stamps_of(ids) == gen
        if depth >= total or own.sum(axis=1).min() >= min(k, n):
            break
        depth = min(total, depth * 2)
    return [(scores[i][own[i]][:k], ids[i][own[i]][:k]) for i in range(len(q))]


@dataclass
class EmbeddedImages:
    """A batch of image queries after :func:`embed_images`: each query's answer so far (an exception where its image
    did not decode, else None), the ``k`` of those that did, and their embeddings ``(B, D)`` by query generation."""

    answers: list[dict[str, Any] | Exception | None]
    ks: list[int]
    embeddings: dict[int, np.ndarray]


def embed_images(version: ServedVersion, queries: list[ImageQuery], merge: str, max_pixels: int) -> EmbeddedImages:
    """The first stage of an image batch: each query decoded (one that fails keeps its error, a QueryError or whatever
    the decoder raised, and the others go on), then one forward pass per query generation — the gallery's query
    generation, or with ``merge: rank`` over a mixed gallery every generation in it."""
    answers: list[dict[str, Any] | Exception | None] = []
    decoded: list[np.ndarray] = []
    for q in queries:
        try:
            decoded.append(decode_query(q.data, version, max_pixels))
            answers.append(None)
        except Exception as err:  # that query's caller gets it (a 4xx, or a 500); its batch goes on
            answers.append(err)
    ks = [q.k for q, a in zip(queries, answers) if a is None]
    gens = sorted(version.mix) if merge == "rank" and len(version.mix) > 1 else [version.query_generation]
    images = np.stack(decoded) if decoded else None
    embedded = {g: _embed(version, images, g, adapt=len(gens) == 1) for g in gens} if images is not None else {}
    return EmbeddedImages(answers, ks, embedded)


def search_images(version: ServedVersion, batch: EmbeddedImages) -> list[dict[str, Any] | Exception]:
    """The second stage: the embedded queries searched (one generation: one FAISS call; several: each generation's
    vectors with its own query, the lists merged by rank, Seo et al.); runs while the next batch is embedded."""
    if not batch.embeddings:
        return batch.answers  # type: ignore[return-value]  # every image failed to decode
    hits = _search_embedded(version, batch.embeddings, batch.ks)
    found = iter(hits)
    return [next(found) if a is None else a for a in batch.answers]


def _search_embedded(version: ServedVersion, embeddings: dict[int, np.ndarray], ks: list[int]) -> list[dict[str, Any]]:
    k = max(ks)
    gens = sorted(embeddings)
    if len(gens) == 1:
        scores, ids = version.index.search(embeddings[gens[0]], k, query_generation=version.searches_as(gens[0]))
        return [_hits(version, scores[i, :qk], ids[i, :qk], gens[0]) for i, qk in enumerate(ks)]
    lists = {g: _own_lists(version, embeddings[g], g, k) for g in gens}
    out = []
    for i, qk in enumerate(ks):
        s, d, _ = merge_by_rank([lists[g][i] for g in gens], qk)
        out.append(_hits(version, s, d, gens))
    return out
