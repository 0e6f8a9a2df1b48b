"""Exact FAISS gallery index for Euclidean (cosine) or Lorentz embeddings.

* Euclidean (docs/design.md §6): vectors (N, d) are L2-normalised to float32 and
  searched by exact inner product, i.e. cosine similarity.
* Lorentz (docs/design.md §8): hyperboloid points (N, d+1), time first, are stored
  as-is; each query's time coordinate is negated, so the inner product FAISS
  maximises is the Lorentz product <q, g>_L (HBCT Eq. (1)), and because the
  geodesic distance acosh(-K <q, g>_L)/sqrt(K) (HBCT Eq. (3)) is monotone
  decreasing in it, exact MIPS (IndexFlatIP) is exact geodesic kNN.

FAISS ranks in float32; the k returned neighbours are then re-scored in
float64 from the stored vectors (docs/design.md §2 "Numerics": reported distances
must be float64) and re-sorted. Every index carries an
:class:`~components.indexing.manifest.IndexManifest` (docs/design.md §7 "Index
files") that is checked on load and before every search, since FAISS itself
notices neither a same-dimension model swap, a truncated file, nor NaNs.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path

import faiss
import numpy as np

from components.errors import (
    ConfigError,
    IncompatibleQueryError,
    IndexIntegrityError,
)
from components.indexing.build_inputs import checked_gallery_vectors, checked_ids, stored_rows
from components.indexing.manifest import IndexManifest
from components.indexing.vectors import HYPERBOLOID_RTOL, flip_time, hyperboloid_rel_error, in_index_space
from components.io import atomic_write_bytes

__all__ = [
    "INDEX_FILE",
    "MANIFEST_FILE",
    "GalleryIndex",
]

INDEX_FILE = "index.faiss"
MANIFEST_FILE = "manifest.json"
#: Allowed | ||x|| - 1 | for stored Euclidean (unit) vectors on load.
UNIT_NORM_ATOL = 1e-3
#: Queries are re-scored in chunks of this many rows to bound memory.
_CHUNK = 1024
_GEOMETRIES = ("euclidean", "lorentz")


def _maybe_to_gpu(index: faiss.Index) -> faiss.Index:
    """Search on all GPUs when this FAISS build has any; otherwise ``index`` itself."""
    if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
        return faiss.index_cpu_to_all_gpus(index)
    return index


def _serialize(index: faiss.Index) -> bytes:
    return faiss.serialize_index(index).tobytes()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class GalleryIndex:
    """A gallery of embeddings with caller ids, searchable by exact kNN.

    Build with :meth:`build`, persist with :meth:`save`, reopen with
    :meth:`load`. Wraps ``faiss.IndexIDMap2(faiss.IndexFlatIP(dim))``.
    """

    def __init__(self, index: faiss.Index, manifest: IndexManifest) -> None:
        """Internal: use :meth:`build` or :meth:`load`."""
        self._index = index
        self._manifest = manifest
        self._search_index: faiss.Index | None = None

    # ------------------------------------------------------------------ build
    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        ids: np.ndarray,
        *,
        geometry: str,
        curvature: float,
        generation: int,
        compatible_generations: tuple[int, ...] | list[int] | None = None,
    ) -> GalleryIndex:
        """Index ``vectors`` (N, D) under int ``ids`` (N,).

        euclidean: D = d, rows are L2-normalised. lorentz: D = d+1 hyperboloid
        points of curvature -``curvature``, time first (checked). Raises
        :class:`~components.errors.DataError` for a bad gallery (empty, not
        2-D, NaN/inf, zero vectors, off-hyperboloid points, bad ids) and
        :class:`~components.errors.ConfigError` for bad parameters.
        ``compatible_generations`` defaults to ``(generation,)``.
        """
        if geometry not in _GEOMETRIES:
            raise ConfigError(f"unknown geometry {geometry!r}; use one of {', '.join(map(repr, _GEOMETRIES))}")
        if not (isinstance(curvature, (int, float)) and math.isfinite(curvature) and curvature > 0):
            raise ConfigError(
                f"curvature must be a finite number > 0, got {curvature!r}; pass the K the gallery was embedded with"
            )
        if isinstance(generation, bool) or not isinstance(generation, (int, np.integer)) or generation < 0:
            raise ConfigError(f"generation must be an int >= 0, got {generation!r}")
        x = checked_gallery_vectors(vectors, geometry)
        n, dim = x.shape
        id64 = checked_ids(ids, n)
        stored = stored_rows(x, geometry, float(curvature))

        index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        index.add_with_ids(np.ascontiguousarray(stored), id64)
        gens = (int(generation),) if compatible_generations is None else tuple(int(g) for g in compatible_generations)
        manifest = IndexManifest(
            generation=int(generation),
            geometry=geometry,
            curvature=float(curvature),
            dim=int(dim),
            count=int(n),
            checksum=_sha256(_serialize(index)),
            index_type="flat_ip",
            compatible_generations=gens,
        )
        return cls(index, manifest)

    # ------------------------------------------------------------- properties
    @property
    def manifest(self) -> IndexManifest:
        """The index's manifest (checksum of the last build/save)."""
        return self._manifest

    @property
    def ntotal(self) -> int:
        """Number of gallery vectors."""
        return int(self._index.ntotal)

    @property
    def dim(self) -> int:
        """Stored vector width: d (euclidean) or d+1 (lorentz)."""
        return int(self._manifest.dim)

    def with_compatible_generations(self, generations: tuple[int, ...] | list[int]) -> GalleryIndex:
        """Same gallery, new set of query generations allowed to search it.

        Use when a later generation passes the compatibility criterion against
        this gallery's generation (docs/design.md §7); call :meth:`save` to persist.
        """
        manifest = replace(self._manifest, compatible_generations=tuple(int(g) for g in generations))
        return GalleryIndex(self._index, manifest)

    # ----------------------------------------------------------------- search
    def _check_queries(self, queries: np.ndarray, query_generation: int | None) -> np.ndarray:
        m = self._manifest
        where = f"index (generation {m.generation}, {m.geometry}, K={m.curvature}, dim {m.dim})"
        if query_generation is not None and query_generation not in m.compatible_generations:
            raise IncompatibleQueryError(
                f"queries from generation {query_generation} cannot search the {where}: it accepts "
                f"generations {list(m.compatible_generations)}; backfill (re-embed the gallery with "
                f"generation {query_generation} and rebuild the index) or query with a compatible model"
            )
        q = np.asarray(queries)
        if q.ndim != 2:
            raise IncompatibleQueryError(
                f"queries must be a 2-D array (Nq, {m.dim}), got shape {q.shape}; "
                "stack query embeddings one row per query"
            )
        if q.shape[1] != m.dim:
            raise IncompatibleQueryError(
                f"queries have width {q.shape[1]} but the {where} stores width {m.dim}; "
                "embed queries with a model of a compatible generation and geometry "
                f"(generations {list(m.compatible_generations)})"
            )
        bad = ~np.isfinite(q).all(axis=1)
        if bad.any():
            raise IncompatibleQueryError(
                f"{int(bad.sum())} of {q.shape[0]} queries contain NaN or inf "
                f"(first at row {int(np.argmax(bad))}); fix the query embeddings before searching"
            )
        fix = (
            "re-embed those queries"
            if m.geometry == "euclidean"
            else f"query the {where} with Lorentz points of its curvature, time coordinate first"
        )
        rows = in_index_space(q, m.geometry, m.curvature, error=IncompatibleQueryError, what="queries", fix=fix)
        return rows if m.geometry == "euclidean" else flip_time(rows)

    def search(
        self, queries: np.ndarray, k: int, *, query_generation: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest gallery items of each query.

        ``queries``: (Nq, dim). Returns ``(scores, ids)``: float64 (Nq, k') and
        int64 (Nq, k'), k' = min(k, ntotal), best first. Scores are higher =
        nearer: cosine similarity (euclidean) or minus the geodesic distance
        -acosh(max(1, -K <q, g>_L))/sqrt(K) (lorentz), recomputed in float64.
        Raises :class:`~components.errors.IncompatibleQueryError` when the
        width, finiteness, geometry (hyperboloid check) or ``query_generation``
        (if given) does not fit the manifest.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        qx = self._check_queries(queries, query_generation)  # float64, time flipped for lorentz
        k_eff = min(int(k), self.ntotal)
        if self._search_index is None:
            self._search_index = _maybe_to_gpu(self._index)
        nq = qx.shape[0]
        scores = np.empty((nq, k_eff), dtype=np.float64)
        ids = np.empty((nq, k_eff), dtype=np.int64)
        curv = self._manifest.curvature
        for start in range(0, nq, _CHUNK):
            sl = slice(start, start + _CHUNK)
            q = qx[sl]
            _, found = self._search_index.search(np.ascontiguousarray(q, dtype=np.float32), k_eff)
            if (found < 0).any():
                raise IndexIntegrityError(
                    "FAISS returned fewer neighbours than the index holds; the index is inconsistent, rebuild it"
                )
            g = self._index.reconstruct_batch(found.ravel()).astype(np.float64)
            g = g.reshape(found.shape[0], k_eff, -1)
            if self._manifest.geometry == "euclidean":
                g /= np.linalg.norm(g, axis=2, keepdims=True)
                s = np.clip(np.einsum("nd,nkd->nk", q, g), -1.0, 1.0)
            else:
                inner = np.einsum("nd,nkd->nk", q, g)  # <q, g>_L (q's time already negated)
                s = -np.arccosh(np.maximum(-curv * inner, 1.0)) / math.sqrt(curv)
            order = np.argsort(-s, axis=1, kind="stable")
            scores[sl] = np.take_along_axis(s, order, axis=1)
            ids[sl] = np.take_along_axis(found, order, axis=1)
        return scores, ids

    # ---------------------------------------------------------- persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``index.faiss`` then ``manifest.json`` (last) into ``directory``.

        Each file is replaced atomically (temp file + fsync + rename), and the
        manifest records the sha256 of the exact bytes written. A failure while
        writing the index file leaves a previous save intact; a crash between
        the two renames leaves a new index beside the old manifest, which
        :meth:`load` reports as a checksum mismatch. Returns ``directory``.
        """
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        data = _serialize(self._index)
        manifest = replace(self._manifest, checksum=_sha256(data))
        atomic_write_bytes(d / INDEX_FILE, data)
        atomic_write_bytes(d / MANIFEST_FILE, manifest.to_json().encode("utf-8"))
        self._manifest = manifest
        return d

    @classmethod
    def load(cls, directory: str | Path, *, geometry: str | None = None) -> GalleryIndex:
        """Open an index saved by :meth:`save`, verifying it against its manifest.

        Checks: manifest present and valid, index file present, sha256 equal
        to the manifest's, the file deserialises to an IDMap2 over a flat
        inner-product index, ntotal == count, d == dim, ids unique, stored
        vectors finite and of the manifest's geometry (unit norm / on the
        hyperboloid). Any failure raises
        :class:`~components.errors.IndexIntegrityError`. If ``geometry`` is
        given and differs from the manifest's, raises
        :class:`~components.errors.IncompatibleQueryError`.
        """
        d = Path(directory)
        mpath, ipath = d / MANIFEST_FILE, d / INDEX_FILE
        rebuild = "rebuild the index from the gallery embeddings and save it again"
        if not mpath.is_file():
            raise IndexIntegrityError(
                f"no {MANIFEST_FILE} in {d}: the index was never saved completely or was copied "
                f"without its manifest; {rebuild}"
            )
        try:
            manifest = IndexManifest.from_json(mpath.read_bytes())
        except IndexIntegrityError as e:
            raise IndexIntegrityError(f"{mpath}: {e}") from e
        if geometry is not None and geometry != manifest.geometry:
            raise IncompatibleQueryError(
                f"the index in {d} is {manifest.geometry} but {geometry} was requested; "
                f"load an index built with {geometry} embeddings or backfill the gallery"
            )
        if not ipath.is_file():
            raise IndexIntegrityError(f"index file {ipath} is missing; {rebuild}")
        data = ipath.read_bytes()
        digest = _sha256(data)
        if digest != manifest.checksum:
            raise IndexIntegrityError(
                f"index file {ipath} ({len(data)} bytes) does not match the sha256 in its manifest "
                f"(expected {manifest.checksum[:12]}..., got {digest[:12]}...): it is truncated, "
                f"tampered with, or from another save; {rebuild}"
            )
        try:
            index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        except RuntimeError as e:
            raise IndexIntegrityError(f"FAISS cannot read {ipath} ({e}); {rebuild}") from e
        cls._verify_loaded(index, manifest, ipath, rebuild)
        return cls(index, manifest)

    @staticmethod
    def _verify_loaded(index: faiss.Index, manifest: IndexManifest, ipath: Path, rebuild: str) -> None:
        """Structural and content checks of a deserialised index against its manifest."""
        if not isinstance(index, faiss.IndexIDMap2):
            raise IndexIntegrityError(
                f"{ipath} holds a {type(index).__name__}, not the IndexIDMap2 that "
                f"index_type {manifest.index_type!r} requires; {rebuild}"
            )
        flat = faiss.downcast_index(index.index)
        if not isinstance(flat, faiss.IndexFlat) or flat.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise IndexIntegrityError(f"{ipath} does not wrap an exact inner-product index (flat_ip); {rebuild}")
        if index.ntotal != manifest.count or index.d != manifest.dim:
            raise IndexIntegrityError(
                f"{ipath} holds {index.ntotal} vectors of width {index.d} but its manifest says "
                f"{manifest.count} of width {manifest.dim}; {rebuild}"
            )
        stored = faiss.rev_swig_ptr(flat.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
        if not np.isfinite(stored).all():
            raise IndexIntegrityError(f"{ipath} contains NaN or inf vectors; {rebuild}")
        if manifest.geometry == "euclidean":
            norms = np.linalg.norm(stored.astype(np.float64), axis=1)
            ok = np.abs(norms - 1.0) <= UNIT_NORM_ATOL
        else:
            ok = hyperboloid_rel_error(stored, manifest.curvature) <= HYPERBOLOID_RTOL
        if not ok.all():
            raise IndexIntegrityError(
                f"{int((~ok).sum())} vectors in {ipath} do not fit the manifest's geometry "
                f"{manifest.geometry!r} (K={manifest.curvature}); {rebuild}"
            )
        ids = faiss.vector_to_array(index.id_map)
        if np.unique(ids).size != ids.size:
            raise IndexIntegrityError(f"{ipath} contains duplicate ids; {rebuild}")
