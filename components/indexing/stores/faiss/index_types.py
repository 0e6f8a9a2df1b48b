"""The FAISS structures behind a GalleryIndex: made, tuned, verified and measured (docs/design.md §8).

What FAISS stores, per geometry and index type (docs/design.md §8.1, §8.3; the forms
are defined in :mod:`components.indexing.vectors`):

* euclidean, every type: float32 unit rows, inner-product metric (= cosine), exact ranking.
* lorentz, ``flat``: the hyperboloid points themselves, inner-product metric, each
  query's time coordinate negated — exact MIPS = exact geodesic kNN (HBCT Eq. (1), (3)).
* lorentz, ``ivf`` / ``hnsw`` / ``ivfpq`` / ``ivfsq``: by default the ``proxy`` form (L2 over
  [2⁻⁸·g_t, g_s], :mod:`components.indexing.vectors`); FAISS returns ``rerank``·k candidates that are re-ranked
  by exact float64 geodesic distance. Optional: the exact MIPS→L2 reduction (``mips_l2``): gallery g (d+1, time
  first) stored as g' = [g, sqrt(M² − ‖g‖²)] with M ≥ max ‖g‖, so every g' lies on the sphere of radius M; a query
  q becomes q' = λ[−q_t, q_s, 0] with λ = M / ‖q‖ > 0. Then ‖q' − g'‖² = 2M² − 2λ<q, g>_L, so for each query the
  L2 ranking is the geodesic ranking, exactly (λ puts the query on the gallery's sphere, which makes IVF's coarse
  assignment behave as for an ordinary L2 search).

Why the proxy: measured with ``benchmarks/index_speed.py`` on clustered synthetic
hyperboloid galleries (d=128, radii 0.7–2.6; recall@10 against exact search, defaults
otherwise). HNSW32, 200k items, ef_search 96: 0.985 with the proxy and 3× re-ranking,
0.677 with the exact MIPS→L2 reduction — its graph links gallery rows by L2 between
augmented rows, which is not geodesic nearness, and every query sits far from all rows;
HNSW over the raw points with inner product reached ≈ 0.02–0.1 (50k, d=64). IVF
(nprobe 16): 0.998 (proxy) vs 0.9997 (reduction) at 200k, 0.997 vs 0.987 at 50k; IVF-PQ
at 50k: 0.927 (proxy, PQ43) vs 0.656 (reduction, PQ26). One rule for all approximate
types: the proxy, with re-ranking; ``lorentz_form="mips_l2"`` remains selectable.

Every index is ``IDMap2`` over a ``faiss.index_factory`` structure, so that
:func:`reconstruct` returns the stored rows by caller id (IVF keeps a direct map for
this); ``shards`` > 1 are independent sub-indexes (one file each) that share one
trained quantizer, and an id lives in shard ``id_hash(id) % shards``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from components.errors import IndexIntegrityError
from components.indexing.stores.faiss.build_inputs import id_hash
from components.indexing.stores.faiss.index_config import IndexConfig
from components.indexing.stores.faiss.manifest import IVF_TYPES, QUANTIZED_TYPES, IndexManifest
from components.indexing.vectors import lorentz_proxy_rows
from components.io import file_sha256

__all__ = [
    "SHARD_SALT",
    "candidates",
    "describe",
    "expected_factory",
    "file_sha256",
    "gallery_rows",
    "index_sha256",
    "lorentz_l2_queries",
    "lorentz_l2_rows",
    "new_shards",
    "query_form",
    "read_index_file",
    "reconstruct",
    "rescore",
    "set_search_params",
    "shard_of",
    "stored_form",
    "verify_shards",
]

#: Allowed | ||g'|| / M - 1 | for rows stored by the Lorentz L2 reduction.
L2_RADIUS_RTOL = 1e-4
#: Salt of the id hash that routes ids to shards (differs from sampling seeds' use).
SHARD_SALT = 0x5EED5EED
#: Reconstructed vectors checked on load for types whose vectors are not one array.
VERIFY_SAMPLE = 1024
_METRICS = {"inner_product": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}


def lorentz_l2_rows(points: np.ndarray, radius: float) -> np.ndarray:
    """Gallery hyperboloid points (N, d+1) -> float32 rows (N, d+2) [g, sqrt(M² − ‖g‖²)] of norm M = ``radius``.

    ``radius`` must be >= every ‖g‖ (computed in float64 from float32 ``points``);
    the extra coordinate is clamped at 0 for the farthest points.
    """
    g = np.asarray(points, dtype=np.float32)
    sq = np.einsum("ij,ij->i", g.astype(np.float64), g.astype(np.float64))
    extra = np.sqrt(np.maximum(radius * radius - sq, 0.0)).astype(np.float32)
    return np.concatenate([g, extra[:, None]], axis=1)


def lorentz_l2_queries(flipped: np.ndarray, radius: float) -> np.ndarray:
    """Queries with the time coordinate already negated (N, d+1) -> float32 (N, d+2) λ[q', 0], ‖λq'‖ = ``radius``."""
    q = np.asarray(flipped, dtype=np.float64)
    scale = radius / np.linalg.norm(q, axis=1, keepdims=True)
    return np.concatenate([q * scale, np.zeros((q.shape[0], 1))], axis=1).astype(np.float32)


def stored_form(rows: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """float32 rows FAISS stores for checked gallery rows (n, dim) (unit / hyperboloid points)."""
    form = params.get("lorentz_form")
    if form == "proxy":
        return lorentz_proxy_rows(rows)
    if form == "mips_l2":
        return lorentz_l2_rows(rows, float(params["l2_radius"]))
    return np.ascontiguousarray(rows, dtype=np.float32)


def query_form(qx: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """float32 rows FAISS searches for checked float64 queries ``qx`` (n, dim): unit rows / time negated."""
    form = params.get("lorentz_form")
    if form == "proxy":
        q = lorentz_proxy_rows(qx)
        q[:, 0] = -q[:, 0]  # the proxy is symmetric: undo the negation
        return q
    if form == "mips_l2":
        return lorentz_l2_queries(qx, float(params["l2_radius"]))
    return np.ascontiguousarray(qx, dtype=np.float32)


def gallery_rows(stored: np.ndarray, params: dict[str, Any], dim: int) -> np.ndarray:
    """The float32 gallery rows (n, dim) given back by stored rows (n, stored_dim) — exactly, powers of two."""
    rows = np.array(stored[:, :dim], dtype=np.float32)
    if params.get("lorentz_form") == "proxy":
        rows[:, 0] /= np.float32(params["time_scale"])
    return rows


def candidates(params: dict[str, Any], k: int, ntotal: int) -> int:
    """How many neighbours to ask FAISS for when ``k`` are wanted: ``rerank``·k for the proxy form."""
    return min(ntotal, k * int(params.get("rerank", 1))) if params.get("lorentz_form") == "proxy" else k


def shard_of(ids: np.ndarray, shards: int) -> np.ndarray:
    """Shard number (n,) of each int64 id (n,) for an index of ``shards`` files."""
    if shards == 1:
        return np.zeros(len(ids), dtype=np.int64)
    return (id_hash(ids, SHARD_SALT) % np.uint64(shards)).astype(np.int64)


def new_shards(config: IndexConfig, factory: str, metric: str, width: int, train: np.ndarray | None) -> list:
    """Empty, trained ``IDMap2`` indexes (one per shard) of ``factory`` over rows of ``width``.

    ``train``: float32 (m, width) sample in stored form, required for the IVF types.
    Search parameters are left to :func:`set_search_params`.
    """
    index = faiss.index_factory(width, factory, _METRICS[metric])
    inner = faiss.downcast_index(index.index)
    if isinstance(inner, faiss.IndexHNSW):
        inner.hnsw.efConstruction = config.ef_construction
    if config.trained:
        ivf = faiss.extract_index_ivf(index)
        ivf.cp.seed = config.seed
        index.train(np.ascontiguousarray(train, dtype=np.float32))
    shards = [index] + [faiss.clone_index(index) for _ in range(config.shards - 1)]
    if config.trained:
        for s in shards:
            faiss.extract_index_ivf(s).make_direct_map()
    return shards


def set_search_params(index: faiss.Index, params: dict[str, Any]) -> None:
    """Set ``nprobe`` / ``efSearch`` of one (IDMap2) shard from manifest-style ``params``."""
    space = faiss.ParameterSpace()
    if "nprobe" in params:
        space.set_index_parameter(index, "nprobe", int(params["nprobe"]))
    if "ef_search" in params:
        space.set_index_parameter(index, "efSearch", int(params["ef_search"]))


def describe(index: faiss.Index) -> str:
    """The ``index_factory`` string that ``index``'s actual structure corresponds to (best effort)."""
    if not isinstance(index, faiss.IndexIDMap2):
        return type(index).__name__
    inner = faiss.downcast_index(index.index)
    if isinstance(inner, faiss.IndexFlat):
        return "IDMap2,Flat"
    if isinstance(inner, faiss.IndexHNSWFlat):
        return f"IDMap2,HNSW{inner.hnsw.nb_neighbors(1)},Flat"
    if isinstance(inner, (faiss.IndexIVFFlat, faiss.IndexIVFPQ, faiss.IndexIVFScalarQuantizer)):
        quantizer = faiss.downcast_index(inner.quantizer)
        coarse = f"IVF{inner.nlist}" if isinstance(quantizer, faiss.IndexFlat) else f"IVF{inner.nlist}_?"
        if type(inner) is faiss.IndexIVFFlat:
            return f"IDMap2,{coarse},Flat"
        if type(inner) is faiss.IndexIVFPQ:
            return f"IDMap2,{coarse},PQ{inner.pq.M}x{inner.pq.nbits}np"  # file layout is the same either way
        if type(inner) is faiss.IndexIVFScalarQuantizer and inner.sq.qtype == faiss.ScalarQuantizer.QT_8bit:
            return f"IDMap2,{coarse},SQ8"
    return f"IDMap2,{type(inner).__name__}"


def expected_factory(index_type: str, params: dict[str, Any]) -> str:
    """The factory string that ``index_type`` with manifest ``params`` must have been built with."""
    p = params
    return {
        "flat": lambda: "IDMap2,Flat",
        "ivf": lambda: f"IDMap2,IVF{p['nlist']},Flat",
        "hnsw": lambda: f"IDMap2,HNSW{p['hnsw_m']},Flat",
        "ivfpq": lambda: f"IDMap2,IVF{p['nlist']},PQ{p['pq_m']}x{p['pq_nbits']}np",
        "ivfsq": lambda: f"IDMap2,IVF{p['nlist']},SQ8",
    }[index_type]()


def reconstruct(shards: list, ids: np.ndarray) -> np.ndarray:
    """Stored float32 rows (n, width) of int64 ``ids`` (n,), each from its shard."""
    if len(shards) == 1:
        return shards[0].reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))
    which = shard_of(ids, len(shards))
    out = np.empty((len(ids), shards[0].d), dtype=np.float32)
    for i, s in enumerate(shards):
        sel = which == i
        if sel.any():
            out[sel] = s.reconstruct_batch(np.ascontiguousarray(ids[sel], dtype=np.int64))
    return out


def rescore(shards: list, m: IndexManifest, q: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 scores of checked queries ``q`` (n, dim) against FAISS ids ``found`` (n, k), re-sorted best first.

    The space's candidate scores (:meth:`Space.candidate_scores <components.geometry.space.Space.candidate_scores>`:
    cosine, or minus the geodesic distance; ``q`` in the space's query form) from the stored vectors — for ivfpq the
    decoded ones, put back on the space first (:meth:`~components.geometry.space.Space.restore_decoded`). Missing
    ids (-1) score -inf and go last.
    """
    valid = found >= 0
    g = np.zeros((*found.shape, m.dim))
    g[valid] = gallery_rows(reconstruct(shards, found[valid]), m.params, m.dim)
    space = m.space
    if m.index_type in QUANTIZED_TYPES:
        space.restore_decoded(g)
    s = np.where(valid, space.candidate_scores(q, g), -np.inf)
    order = np.argsort(-s, axis=1, kind="stable")
    return np.take_along_axis(s, order, axis=1), np.take_along_axis(found, order, axis=1)


# ------------------------------------------------------------------ files
def index_sha256(index: faiss.Index) -> str:
    """sha256 of ``faiss.write_index(index)``'s bytes, streamed (no serialised copy held)."""
    h = hashlib.sha256()

    def take(b: bytes) -> int:
        h.update(b)
        return len(b)

    faiss.write_index(index, faiss.PyCallbackIOWriter(take))
    return h.hexdigest()


def read_index_file(path: Path, sha256: str, rebuild: str) -> faiss.Index:
    """FAISS index in ``path`` after checking that the file exists and its bytes have ``sha256``.

    The checksum is checked before FAISS parses anything (a corrupted size field
    could make it allocate wildly). IndexIntegrityError otherwise.
    """
    if not path.is_file():
        raise IndexIntegrityError(f"index file {path} is missing; {rebuild}")
    digest = file_sha256(path)
    if digest != sha256:
        raise IndexIntegrityError(
            f"index file {path} ({path.stat().st_size} bytes) does not match the sha256 in its manifest "
            f"(expected {sha256[:12]}..., got {digest[:12]}...): it is truncated, "
            f"tampered with, or from another save; {rebuild}"
        )
    try:
        return faiss.read_index(str(path))
    except RuntimeError as e:
        raise IndexIntegrityError(f"FAISS cannot read {path} ({e}); {rebuild}") from e


# ------------------------------------------------------------- verification
def _rows_fit(stored: np.ndarray, m: IndexManifest) -> np.ndarray:
    """Per-row bool: stored float32 rows (n, stored_dim) finite and points of the manifest's space."""
    ok = np.isfinite(stored).all(axis=1)
    if m.index_type in QUANTIZED_TYPES:  # decoded codes: approximate, only finiteness is checkable
        return ok
    ok &= m.space.on_space(gallery_rows(stored, m.params, m.dim))
    if m.params.get("lorentz_form") == "mips_l2":
        norms = np.linalg.norm(stored.astype(np.float64), axis=1)
        ok &= np.abs(norms / float(m.params["l2_radius"]) - 1.0) <= L2_RADIUS_RTOL
    return ok


def verify_shards(shards: list, m: IndexManifest, paths: list[Path], rebuild: str) -> None:
    """Structure and content of deserialised shards against manifest ``m``; IndexIntegrityError otherwise.

    Each shard: ``IDMap2`` whose structure is the manifest's ``factory`` (which must fit
    ``index_type`` and ``params``), its metric and stored width; IVF with a direct map.
    All: ntotal == count, ids unique and in their shard; stored vectors finite and of
    the manifest's geometry — every vector for flat, a sample of reconstructed ones otherwise.
    """
    want = expected_factory(m.index_type, m.params)
    if m.factory != want:
        raise IndexIntegrityError(
            f"the manifest's factory {m.factory!r} does not fit its index_type {m.index_type!r} and params "
            f"(expected {want!r}); {rebuild}"
        )
    all_ids = []
    for i, (s, path) in enumerate(zip(shards, paths)):
        got = describe(s)
        if got != m.factory:
            raise IndexIntegrityError(
                f"{path} holds a {got!r} index but its manifest says {m.factory!r} (index_type {m.index_type!r}); "
                f"{rebuild}"
            )
        if s.metric_type != _METRICS[m.metric] or s.d != m.stored_dim:
            raise IndexIntegrityError(
                f"{path} stores width {s.d} with metric {s.metric_type} but its manifest says width "
                f"{m.stored_dim}, metric {m.metric}; {rebuild}"
            )
        if m.index_type in IVF_TYPES and faiss.extract_index_ivf(s).direct_map.type != faiss.DirectMap.Array:
            raise IndexIntegrityError(f"{path} has no IVF direct map, so vectors cannot be re-scored; {rebuild}")
        ids = faiss.vector_to_array(s.id_map)
        if len(shards) > 1 and (shard_of(ids, len(shards)) != i).any():
            raise IndexIntegrityError(f"{path} holds ids that belong to another shard; {rebuild}")
        all_ids.append(ids)
    ntotal = sum(int(s.ntotal) for s in shards)
    if ntotal != m.count or m.dim > m.stored_dim:
        where = f"{paths[0]} holds" if len(paths) == 1 else f"the {len(paths)} shard files in {paths[0].parent} hold"
        raise IndexIntegrityError(
            f"{where} {ntotal} vectors of width {shards[0].d} but its manifest says {m.count} of width "
            f"{m.stored_dim}; {rebuild}"
        )
    ids = np.concatenate(all_ids)
    if np.unique(ids).size != ids.size:
        raise IndexIntegrityError(f"{paths[0].parent} index contains duplicate ids; {rebuild}")
    for s, path in zip(shards, paths):
        if m.index_type == "flat":
            flat = faiss.downcast_index(s.index)
            rows = faiss.rev_swig_ptr(flat.get_xb(), s.ntotal * s.d).reshape(s.ntotal, s.d)
        else:
            own = faiss.vector_to_array(s.id_map)
            pick = np.unique(np.linspace(0, len(own) - 1, min(len(own), VERIFY_SAMPLE)).astype(np.int64))
            rows = s.reconstruct_batch(own[pick]) if len(own) else np.empty((0, s.d), np.float32)
        ok = _rows_fit(rows, m)
        if not ok.all():
            what = "vectors" if m.index_type == "flat" else f"of {len(rows)} sampled vectors"
            raise IndexIntegrityError(
                f"{int((~ok).sum())} {what} in {path} are not finite or do not fit the manifest's geometry "
                f"{m.geometry!r} (K={m.curvature}); {rebuild}"
            )
