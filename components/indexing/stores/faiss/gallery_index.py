"""FAISS gallery index for Euclidean (cosine) or Lorentz embeddings: exact or approximate.

* Euclidean (docs/design.md §6): L2-normalised float32 vectors (N, d), inner product = cosine.
* Lorentz (docs/design.md §8): hyperboloid points (N, d+1), time first. The geodesic distance
  acosh(-K <q, g>_L)/sqrt(K) (HBCT Eq. (3)) is monotone decreasing in <q, g>_L (HBCT Eq. (1)):
  ``flat`` stores the points as-is and negates each query's time coordinate (exact MIPS,
  ``IDMap2,Flat``); ``ivf`` / ``hnsw`` / ``ivfpq`` / ``ivfsq`` search L2 over [2⁻⁸·g_t, g_s] for ``rerank``·k
  candidates re-ranked by exact geodesic distance (or the MIPS→L2 reduction; see
  :mod:`components.indexing.stores.faiss.index_types` for the measurements behind the choice).

The type and its parameters are an :class:`~components.indexing.stores.faiss.index_config.IndexConfig`.
Galleries are built chunk by chunk (:meth:`GalleryIndex.build_streaming`; memory: the index,
one chunk and the training/recall sample); every build measures recall@10 against exact
search on held-out gallery items and the queries/s of :meth:`GalleryIndex.search`, optionally
choosing nprobe / ef_search for a target recall first (:mod:`components.indexing.stores.faiss.tuning`), and
records them in the manifest (docs/design.md §8.3).

FAISS ranks in float32; the neighbours it returns are re-scored in float64 (docs/design.md §2
"Numerics") and re-sorted — from the stored vectors for flat, ivf and hnsw, from decoded PQ
codes (approximate) for ivfpq / ivfsq. Every index carries an
:class:`~components.indexing.stores.faiss.manifest.IndexManifest` (docs/design.md §7.8), checked on load and
before every search: FAISS itself notices neither a same-dimension model swap, a truncated
file, nor NaNs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from pathlib import Path

import faiss
import numpy as np

from components.errors import IncompatibleQueryError, IndexIntegrityError
from components.faults import crash_point
from components.geometry import Space
from components.indexing.recall import ExactTopK, recall_at_k
from components.indexing.stores.faiss import index_types as it
from components.indexing.stores.faiss.build_inputs import BottomKSample, IdLedger, checked_chunks, id_hash, scan_gallery
from components.indexing.stores.faiss.index_config import IndexConfig, check_build_args
from components.indexing.stores.faiss.manifest import IndexManifest, shards_digest
from components.indexing.stores.faiss.tuning import tune
from components.indexing.vectors import LORENTZ_TIME_SCALE, checked_queries
from components.io import atomic_path, atomic_write_bytes

__all__ = ["INDEX_FILE", "MANIFEST_FILE", "GalleryIndex"]

INDEX_FILE = "index.faiss"
MANIFEST_FILE = "manifest.json"
#: Queries per FAISS search call (FAISS uses BLAS only for large nq·d).
_SEARCH_CHUNK = 65536
#: float64 elements (rows·k·width) re-scored at once, bounding memory to ~32 MiB.
_RESCORE_ELEMS = 1 << 22
#: Neighbours retrieved when measuring recall@10: 10 plus the query's own item.
_RECALL_K = 11
_REBUILD = "rebuild the index from the gallery embeddings and save it again"
Chunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


def _maybe_to_gpu(index: faiss.Index, index_type: str = "flat") -> faiss.Index:
    """A copy on all GPUs for flat and IVF indexes when this FAISS build has GPUs; otherwise ``index`` itself.

    HNSW has no GPU version and stays on the CPU; an index FAISS cannot clone to the
    GPU (e.g. IVF-PQ code sizes the GPU lacks) stays on the CPU too. Untested here:
    the test machines have no GPU.
    """
    if index_type == "hnsw" or not hasattr(faiss, "get_num_gpus") or faiss.get_num_gpus() == 0:
        return index
    try:
        return faiss.index_cpu_to_all_gpus(index)
    except RuntimeError:
        return index


def _write_index_file(path: Path, index: faiss.Index) -> str:
    """Atomically write ``index`` to ``path`` (temp file, fsync, rename); return the file's sha256."""
    with atomic_path(path) as tmp:
        faiss.write_index(index, str(tmp))
        digest = it.file_sha256(tmp)
    return digest


def _file_names(shards: int) -> list[str]:
    return [INDEX_FILE] if shards == 1 else [f"index-{i:03d}-of-{shards:03d}.faiss" for i in range(shards)]


class GalleryIndex:
    """A gallery of embeddings with caller ids, searchable by kNN (exact or approximate, see the manifest).

    Build with :meth:`build` or :meth:`build_streaming`, persist with :meth:`save`,
    reopen with :meth:`load`. Wraps one ``IDMap2`` FAISS index per shard.
    """

    def __init__(self, index: faiss.Index | list[faiss.Index], manifest: IndexManifest) -> None:
        """Internal: use :meth:`build`, :meth:`build_streaming` or :meth:`load`."""
        self._shards = list(index) if isinstance(index, list) else [index]
        self._manifest = manifest
        self._search_index: faiss.Index | None = None
        self._gpu: list[faiss.Index] = []
        self._use_params(manifest.params)

    def _use_params(self, params: dict) -> None:
        """Search every shard with ``params``' nprobe / ef_search from now on (recorded in the manifest)."""
        self._manifest = replace(self._manifest, params=params)
        for s in self._shards:
            it.set_search_params(s, params)
        self._search_index = None

    # ------------------------------------------------------------------ build
    @classmethod
    def build(
        cls,
        vectors: np.ndarray,
        ids: np.ndarray,
        *,
        space: Space,
        generation: int,
        compatible_generations: tuple[int, ...] | list[int] | None = None,
        config: IndexConfig | None = None,
    ) -> GalleryIndex:
        """Index ``vectors`` (N, D), points of ``space``, under int ``ids`` (N,): :meth:`build_streaming` with one
        chunk.

        euclidean: D = d, rows are L2-normalised. lorentz: D = d+1 hyperboloid
        points of the space's curvature, time first (checked). Raises
        :class:`~components.errors.DataError` for a bad gallery (empty, not
        2-D, NaN/inf, zero vectors, off-hyperboloid points, bad ids) and
        :class:`~components.errors.ConfigError` for bad parameters.
        ``compatible_generations`` defaults to ``(generation,)``; ``config`` to flat.
        """
        cfg = check_build_args(space, generation, config)
        chunks = partial(checked_chunks, lambda: [(vectors, ids)], space, label=False)
        return cls._build(chunks, space, int(generation), cfg, compatible_generations, None)

    @classmethod
    def build_streaming(
        cls,
        chunks: Chunks,
        *,
        space: Space,
        generation: int,
        config: IndexConfig,
        compatible_generations: tuple[int, ...] | list[int] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> GalleryIndex:
        """Index a gallery that ``chunks()`` yields as (vectors (n, D), int ids (n,)) pieces.

        ``chunks`` is called once per pass and must yield the same chunks each time:
        flat needs one pass; the approximate types two (ids, sample, radius; then add)
        — during the adding pass the exact top-11 of the held-out recall queries is
        accumulated chunk by chunk, so the gallery is never held twice. Peak memory:
        the index, one chunk, the training + recall sample. Vectors are as
        :meth:`build` takes them; every chunk is checked and ids must be unique across
        chunks (:class:`~components.errors.DataError` naming the chunk).
        ``on_progress(n_added)`` is called after each chunk is added.
        """
        cfg = check_build_args(space, generation, config)
        checked = partial(checked_chunks, chunks, space, label=True)
        return cls._build(checked, space, int(generation), cfg, compatible_generations, on_progress)

    @classmethod
    def _build(
        cls,
        passes: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
        space: Space,
        generation: int,
        cfg: IndexConfig,
        compatible_generations: tuple[int, ...] | list[int] | None,
        on_progress: Callable[[int], None] | None,
    ) -> GalleryIndex:
        """Fill the index from ``passes()`` (checked float32 rows, ids), then measure recall and queries/s."""
        t0 = time.perf_counter()
        l2_form = cfg.l2_form(space)
        metric = "l2" if l2_form else "inner_product"
        shards, exact = None, None
        if cfg.approximate:  # pass 1: ids, samples, radius -> trained, empty shards
            scan = scan_gallery(passes(), cfg.recall_queries + cfg.train_size * cfg.trained, cfg.seed)
            ledger, n = scan.ledger, scan.ledger.count
            width = cfg.stored_width(space, scan.rows.shape[1])
            params = {**cfg.params(width, n), "metric": metric, "stored_dim": width}
            if l2_form and cfg.lorentz_form == "proxy":
                params.update(lorentz_form="proxy", time_scale=LORENTZ_TIME_SCALE, rerank=cfg.rerank)
            elif l2_form:
                params.update(lorentz_form="mips_l2", l2_radius=math.sqrt(scan.max_sq_norm))
            factory = cfg.factory_string(width, n)
            train = scan.rows[len(scan.rows) - cfg.train_count(n) :] if cfg.trained else None
            shards = it.new_shards(
                cfg, factory, metric, width, None if train is None else it.stored_form(train, params)
            )
            q_rows, q_ids = scan.rows[: min(cfg.recall_queries, n)], scan.ids[: min(cfg.recall_queries, n)]
            del scan, train
            exact = ExactTopK(space.query_form(q_rows), min(_RECALL_K, n))
            check = IdLedger(keep=False)
        else:
            ledger = check = IdLedger()
            sample = BottomKSample(cfg.recall_queries)
        added = 0
        for rows, ids in passes():  # the (second) pass: add
            if shards is None:
                width = rows.shape[1]
                factory, params = cfg.factory_string(width, 1), {**cfg.params(width, 1), "metric": metric}
                params["stored_dim"] = width
                shards = it.new_shards(cfg, factory, metric, width, None)
            check.add(ids)
            if exact is not None:
                exact.add(rows, ids)
            else:
                sample.offer(id_hash(ids, cfg.seed), rows, ids)
            stored, which = it.stored_form(rows, params), it.shard_of(ids, len(shards))
            for i, s in enumerate(shards):
                sel = slice(None) if len(shards) == 1 else which == i
                s.add_with_ids(np.ascontiguousarray(stored[sel]), np.ascontiguousarray(ids[sel]))
            added += len(ids)
            if on_progress is not None:
                on_progress(added)
            if cfg.approximate and 2 * (added - len(ids)) < ledger.count <= 2 * added:
                crash_point("index.half_added")  # the fault-injection tests' kill half-way through the adding pass
        if exact is not None:
            ledger.same_as(check)
        else:
            ledger.check_unique()
            q_rows, q_ids = sample.result()
        gens = (generation,) if compatible_generations is None else tuple(int(g) for g in compatible_generations)
        digests = [it.index_sha256(s) for s in shards]
        manifest = IndexManifest(
            generation=generation, geometry=space.name, curvature=space.curvature, dim=int(q_rows.shape[1]),
            count=ledger.count, checksum=digests[0] if len(digests) == 1 else shards_digest(digests),
            index_type=cfg.type, factory=factory, params=params, compatible_generations=gens,
            shard_checksums=tuple(digests) if len(digests) > 1 else (),
        )  # fmt: skip
        index = cls(shards, manifest)
        qx = space.query_form(q_rows.astype(np.float64))
        k, truth = min(_RECALL_K, ledger.count), None if exact is None else exact.result()
        if cfg.target_recall is not None and truth is not None and len(q_ids) >= 2:  # tune on one half (§8.3)
            h = len(q_ids) // 2

            def recall_with(p: dict) -> float | None:
                index._use_params(p)
                return recall_at_k(index._search(qx[:h], k)[1], truth[:h], q_ids[:h], _RECALL_K - 1)

            index._use_params(tune(params, cfg.target_recall, recall_with))
            qx, truth, q_ids = qx[h:], truth[h:], q_ids[h:]
        index._searcher()  # a GPU copy is made outside the timing
        t = time.perf_counter()
        _, found = index._search(qx, k)
        qps = len(qx) / max(time.perf_counter() - t, 1e-9)
        recall = 1.0 if truth is None else recall_at_k(found, truth, q_ids, _RECALL_K - 1)
        index._manifest = replace(
            index._manifest, recall_at_10=recall, recall_queries=len(q_ids), search_qps=qps,
            build_seconds=time.perf_counter() - t0,
        )  # fmt: skip
        return index

    # ------------------------------------------------------------- properties
    @property
    def manifest(self) -> IndexManifest:
        """The index's manifest (checksum of the last build/save)."""
        return self._manifest

    @property
    def ntotal(self) -> int:
        """Number of gallery vectors."""
        return sum(int(s.ntotal) for s in self._shards)

    @property
    def dim(self) -> int:
        """Query / gallery vector width: d (euclidean) or d+1 (lorentz)."""
        return int(self._manifest.dim)

    def with_compatible_generations(self, generations: tuple[int, ...] | list[int]) -> GalleryIndex:
        """Same gallery, new set of query generations allowed to search it.

        Use when a later generation passes the compatibility criterion against
        this gallery's generation (docs/design.md §7); call :meth:`save` to persist.
        """
        return GalleryIndex(self._shards, self._manifest.with_compatible(generations))

    # ----------------------------------------------------------------- search
    def _check_queries(self, queries: np.ndarray, query_generation: int | None) -> np.ndarray:
        m = self._manifest
        return checked_queries(
            queries, dim=m.dim, space=m.space, generations=m.compatible_generations,
            query_generation=query_generation, error=IncompatibleQueryError,
            where=f"index (generation {m.generation}, {m.geometry}, K={m.curvature}, dim {m.dim})",
        )  # fmt: skip

    def _searcher(self) -> faiss.Index:
        """The index FAISS searches: the shard itself or ``IndexShards`` over them, on GPUs when available."""
        if self._search_index is None:
            self._gpu = [_maybe_to_gpu(s, self._manifest.index_type) for s in self._shards]
            if len(self._gpu) == 1:
                self._search_index = self._gpu[0]
            else:
                self._search_index = faiss.IndexShards(self._gpu[0].d, True, False)
                for s in self._gpu:
                    self._search_index.add_shard(s)
        return self._search_index

    def search(
        self, queries: np.ndarray, k: int, *, query_generation: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest gallery items of each query.

        ``queries``: (Nq, dim). Returns ``(scores, ids)``: float64 (Nq, k') and
        int64 (Nq, k'), k' = min(k, ntotal), best first. Scores are higher =
        nearer: cosine similarity (euclidean) or minus the geodesic distance
        -acosh(max(1, -K <q, g>_L))/sqrt(K) (lorentz), recomputed in float64 from
        the stored vectors (ivfpq / ivfsq: from the decoded, approximate ones). Approximate
        types may find fewer than k' items for a query: the missing slots, last,
        have id -1 and score -inf. Raises
        :class:`~components.errors.IncompatibleQueryError` when the width,
        finiteness, geometry (hyperboloid check) or ``query_generation`` (if
        given) does not fit the manifest.
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        return self._search(self._check_queries(queries, query_generation), min(int(k), self.ntotal))

    def _search(self, qx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` of checked float64 queries ``qx`` (nq, dim), time negated for lorentz; k <= ntotal."""
        m = self._manifest
        kc = it.candidates(m.params, k, self.ntotal)
        scores = np.empty((len(qx), k), dtype=np.float64)
        ids = np.empty((len(qx), k), dtype=np.int64)
        step = max(1, _RESCORE_ELEMS // (kc * m.stored_dim))
        for start in range(0, len(qx), _SEARCH_CHUNK):
            _, found = self._searcher().search(it.query_form(qx[start : start + _SEARCH_CHUNK], m.params), kc)
            if m.index_type == "flat" and (found < 0).any():
                raise IndexIntegrityError(f"FAISS returned fewer neighbours than the index holds; {_REBUILD}")
            for sub in range(0, found.shape[0], step):
                rows = slice(start + sub, start + sub + step)
                s, i = it.rescore(self._shards, m, qx[rows], found[sub : sub + step])
                scores[rows], ids[rows] = s[:, :k], i[:, :k]
        return scores, ids

    # ---------------------------------------------------------- persistence
    def save(self, directory: str | Path) -> Path:
        """Write the index file(s) then ``manifest.json`` (last) into ``directory``.

        One ``index.faiss``, or ``index-III-of-SSS.faiss`` per shard, each replaced atomically (temp file + fsync +
        rename); the manifest records each file's sha256. A crash before the manifest's rename leaves new index bytes
        beside the old manifest: :meth:`load` reports a checksum mismatch. Index files of an earlier save that the
        new manifest does not name are removed afterwards. Returns ``directory``.
        """
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        names = _file_names(len(self._shards))
        digests = [_write_index_file(d / name, s) for name, s in zip(names, self._shards)]
        manifest = replace(
            self._manifest,
            checksum=digests[0] if len(digests) == 1 else shards_digest(digests),
            shard_checksums=tuple(digests) if len(digests) > 1 else (),
        )
        atomic_write_bytes(d / MANIFEST_FILE, manifest.to_json().encode("utf-8"))
        for stale in set(p.name for p in d.glob("index*.faiss")) - set(names):
            (d / stale).unlink(missing_ok=True)
        self._manifest = manifest
        return d

    @classmethod
    def load(cls, directory: str | Path, *, geometry: str | None = None) -> GalleryIndex:
        """Open an index saved by :meth:`save`, verifying it against its manifest.

        Checks: manifest valid (version 1 or 2), every index file present with its recorded sha256 (before FAISS
        reads it), structure as the manifest's index_type / factory / params say, ntotal == count, width, ids
        unique, stored vectors finite and of the manifest's geometry (all for flat, a sample otherwise; see
        :func:`~components.indexing.stores.faiss.index_types.verify_shards`): else
        :class:`~components.errors.IndexIntegrityError`.
        A ``geometry`` other than the manifest's raises :class:`~components.errors.IncompatibleQueryError`. Search
        parameters (nprobe, efSearch) are set from the manifest.
        """
        d = Path(directory)
        mpath = d / MANIFEST_FILE
        if not mpath.is_file():
            raise IndexIntegrityError(
                f"no {MANIFEST_FILE} in {d}: the index was never saved completely or was copied "
                f"without its manifest; {_REBUILD}"
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
        paths = [d / name for name in _file_names(manifest.shards)]
        digests = manifest.shard_checksums or (manifest.checksum,)
        shards = [it.read_index_file(path, digest, _REBUILD) for path, digest in zip(paths, digests)]
        it.verify_shards(shards, manifest, paths, _REBUILD)
        return cls(shards, manifest)
