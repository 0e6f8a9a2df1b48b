"""What every database store's index shares (docs/design.md §8.4): checked queries, float64 re-scoring, the
recall@10 a build measures against exact search.

A database answers an approximate top-``limit`` by inner product over the stored rows — unit vectors (cosine), or
hyperboloid points, time first, searched with the query's time coordinate negated, so the inner product is the
Lorentz product ⟨q, g⟩_L and larger is nearer, as on the FAISS path (:mod:`components.indexing.index_types`).
:class:`DatabaseIndex` asks it for ``rerank``·k candidates with their stored vectors and re-scores them in float64
(cosine, or minus the geodesic distance), best first — the same scores :class:`~components.indexing.faiss_index.
GalleryIndex` returns — after the same query checks (width, finiteness, geometry, query generation).
"""

from __future__ import annotations

import re
import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from components.errors import IncompatibleQueryError, IndexIntegrityError
from components.faults import crash_point
from components.geometry import Space, create_space
from components.indexing.backend import StoreManifest, VectorStore
from components.indexing.index_types import ExactTopK, recall_at_k
from components.indexing.parts import GalleryParts, StoredPart
from components.indexing.vectors import LORENTZ_TIME_SCALE, checked_queries, lorentz_proxy_rows

__all__ = [
    "RESCORE_QUERIES",
    "DatabaseIndex",
    "Fetch",
    "alias_name",
    "facts_of",
    "gallery_rows",
    "l2_metric",
    "measure_recall",
    "model_of",
    "query_rows",
    "space_of",
    "stored_rows",
]

#: (checked float32 queries (nq, D), limit) → (ids int64 (nq, limit), stored vectors float32 (nq, limit, D)), -1 pads
Fetch = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
#: neighbours retrieved when measuring recall@10: 10 plus the query's own item
_RECALL_K = 11
#: queries whose candidates one pass fetches and re-scores (their stored vectors are held together)
RESCORE_QUERIES = 1024


_NAME = re.compile(r"^(?P<prefix>[A-Za-z_][A-Za-z0-9_]*?)_g\d+_v\d+(_corpus)?$")


def alias_name(collection: str) -> str:
    """The live alias of the versions named like ``collection`` (``<name>_g<N>_v<k>``): ``<name>_live``."""
    match = _NAME.match(collection)
    return f"{match.group('prefix') if match else collection}_live"


def facts_of(parts: GalleryParts, generation: int) -> dict:
    """What a database records with a version's table or collection: its generation, geometry, curvature, width and
    the stamps it accepts (the generation and every stamp ``parts`` holds: a partial backfill's mix)."""
    first = next(parts.parts()).gallery
    space = first.retrieval_space
    return {
        "generation": int(generation),
        "geometry": space.name,
        "curvature": space.curvature,
        "dim": int(first.vectors().shape[1]),
        "accepts": sorted({int(generation), *np.unique(parts.column("stamps")).tolist()}),
    }


def space_of(facts: dict) -> Space:
    """The space of a table or collection, from its :func:`facts_of` (its stored geometry and curvature)."""
    return create_space(facts["geometry"], facts["curvature"])


def model_of(parts: GalleryParts) -> str:
    """The model that embedded the store's own rows, from its ``producer.txt`` (``model sha256 <hex>; …``); ''
    when the store was assembled rather than embedded (a partial backfill's mix, a linked full backfill)."""
    mark = parts.path / "producer.txt"
    text = mark.read_text() if mark.is_file() else ""
    return f"sha256:{text.split()[2][:16]}" if text.startswith("model sha256 ") else ""


def l2_metric(space: Space) -> bool:
    """Whether the database ranks by L2: galleries whose similarity is indefinite (Lorentz), over the proxy rows
    [2⁻⁸·g_t, g_s] whose candidates are re-ranked by the exact Lorentz product, as the FAISS path's approximate types
    do (docs/design.md §8.3); cosine galleries rank by the inner product of unit rows."""
    return space.indefinite


def stored_rows(what: str, facts: dict, part: StoredPart, *, live: bool) -> np.ndarray:
    """The float32 rows a database stores for ``part`` in the table or collection ``what`` (whose ``facts`` are
    :func:`facts_of`'s). Refused with one line before anything is written: ``what`` is the live one, or the rows are
    of another width or geometry, or stamped with a generation it does not accept, or off its space."""
    if live:
        raise IndexIntegrityError(
            f"the {what} is the live gallery; a new gallery version is written to a new one (bctflow backfill), never "
            "into the live one"
        )
    g = part.gallery
    vectors = g.vectors()
    if vectors.shape[1] != facts["dim"] or g.retrieval_space.name != facts["geometry"]:
        raise IndexIntegrityError(
            f"rows of width {vectors.shape[1]} ({g.retrieval_space.name}) cannot be written into the {what} of width "
            f"{facts['dim']} ({facts['geometry']}); embed them with a model of its generation, or write them into a "
            "new gallery version"
        )
    stray = sorted(set(np.unique(part.stamps).tolist()) - set(facts["accepts"]))
    if stray:
        raise IndexIntegrityError(
            f"rows stamped with generation {stray[0]} cannot be written into the {what}, which holds generation "
            f"{facts['generation']}'s gallery (it accepts stamps {facts['accepts']}); backfill into a new gallery "
            "version instead"
        )
    space = space_of(facts)
    fix = "re-embed them with a model of its geometry"
    rows = space.checked(vectors, error=IndexIntegrityError, what="rows", fix=fix)
    return lorentz_proxy_rows(rows) if l2_metric(space) else rows.astype(np.float32)


def query_rows(q: np.ndarray, space: Space) -> np.ndarray:
    """What the database searches for checked float32 queries (in the space's query form: time negated for lorentz):
    unit rows, or the proxy of the query point itself (time sign restored)."""
    if not l2_metric(space):
        return q
    rows = lorentz_proxy_rows(q)
    rows[:, 0] = -rows[:, 0]
    return rows


def gallery_rows(stored: np.ndarray, space: Space) -> np.ndarray:
    """The gallery rows (…, D) back from the stored ones: exact, the proxy's time scale is a power of two."""
    if l2_metric(space):
        stored[..., 0] /= np.float32(LORENTZ_TIME_SCALE)
    return stored


class DatabaseIndex:
    """A database store's gallery index as the flows search it (:class:`~components.indexing.backend.SearchIndex`).

    ``fetch`` asks the database; ``rerank``: candidates per wanted neighbour (≥ 1), re-scored exactly."""

    def __init__(self, manifest: StoreManifest, fetch: Fetch, rerank: int = 1) -> None:
        self._manifest = manifest
        self._fetch = fetch
        self._rerank = max(1, int(rerank))

    @property
    def manifest(self) -> StoreManifest:
        return self._manifest

    @property
    def ntotal(self) -> int:
        return int(self._manifest.count)

    @property
    def dim(self) -> int:
        return int(self._manifest.dim)

    def with_compatible_generations(self, generations: tuple[int, ...] | list[int]) -> DatabaseIndex:
        return DatabaseIndex(self._manifest.with_compatible(generations), self._fetch, self._rerank)

    def search(
        self, queries: np.ndarray, k: int, *, query_generation: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest gallery items of each query: (scores float64 (nq, k'), ids int64 (nq, k')), k' =
        min(k, ntotal), best first; missing slots (id -1) score -inf. IncompatibleQueryError as GalleryIndex."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        m = self._manifest
        qx = checked_queries(
            queries, dim=m.dim, space=m.space, generations=m.compatible_generations,
            query_generation=query_generation, error=IncompatibleQueryError,
            where=f"{m.store} collection {m.collection} (generation {m.generation}, {m.geometry}, dim {m.dim})",
        )  # fmt: skip
        return self._search(qx, min(int(k), self.ntotal))

    def _search(self, qx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search checked float64 queries (time negated for lorentz) and re-score the candidates in float64, at most
        ``RESCORE_QUERIES`` queries at a time: their candidates' stored vectors are (queries, rerank·k, dim) — 10k
        queries' top-404 of width 129 held 2 GB, 4 GB again in float64, at once."""
        limit = min(self.ntotal, k * self._rerank)
        out = [self._rescored(qx[i : i + RESCORE_QUERIES], k, limit) for i in range(0, len(qx), RESCORE_QUERIES)]
        if not out:
            return np.zeros((0, k)), np.zeros((0, k), dtype=np.int64)
        return np.concatenate([s for s, _ in out]), np.concatenate([f for _, f in out])

    def _rescored(self, qx: np.ndarray, k: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        found, g = self._fetch(qx.astype(np.float32), limit)
        valid = found >= 0
        s = np.where(valid, self._manifest.space.candidate_scores(qx, g.astype(np.float64)), -np.inf)
        order = np.argsort(-s, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(s, order, axis=1), np.take_along_axis(found, order, axis=1)


def measure_recall(index: DatabaseIndex, parts: GalleryParts, n_queries: int) -> StoreManifest:
    """The manifest of ``index`` with its recall@10 against exact search and its queries/s: the first ``n_queries``
    gallery items as queries (each one's own id dropped), the exact top-11 accumulated part by part."""
    space = next(parts.parts()).gallery.retrieval_space
    rows, ids = [], []
    for part in parts.parts():
        rows.append(part.gallery.vectors())
        ids.append(part.gallery.ids)
        if sum(len(r) for r in rows) >= n_queries:
            break
    q = np.concatenate(rows)[:n_queries]
    q_ids = np.concatenate(ids)[:n_queries].astype(np.int64)
    qx = space.query_form(q)
    exact = ExactTopK(qx, min(_RECALL_K, index.ntotal))
    for part in parts.parts():
        exact.add(part.gallery.vectors().astype(np.float32), part.gallery.ids.astype(np.int64))
    t = time.perf_counter()
    _, found = index._search(qx, min(_RECALL_K, index.ntotal))
    qps = len(qx) / max(time.perf_counter() - t, 1e-9)
    recall = recall_at_k(found, exact.result(), q_ids, _RECALL_K - 1)
    return replace(index.manifest, recall_at_10=recall, recall_queries=len(q_ids), search_qps=qps)


class DatabaseStore(VectorStore):
    """What the database stores share: the row-writing loop of a build (:meth:`_write_parts`), the checks of an open,
    a verify and an alias move against the attachment, and the audit of what the store holds (:meth:`audit`).
    A store names what holds a version's rows (:attr:`holder`: "Milvus collection", "LanceDB table"), writes one part
    (:meth:`write`) and reads the database: :meth:`_facts` (a holder's generation and width), :meth:`_total`,
    :meth:`_count` / :meth:`_stamps_outside` (whence :meth:`_counts`), :meth:`_columns`, :meth:`_searchable`."""

    holder: ClassVar[str] = "collection"

    @abstractmethod
    def write(self, collection: str, part: StoredPart, model: str = "") -> None:
        """Upsert the stamped rows of ``part`` into ``collection`` by id (refused with one line, nothing written, as
        :func:`stored_rows` says, or when the holder does not exist)."""

    @abstractmethod
    def _columns(self, collection: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every row the holder has, as the database returns it: (ids, generation stamps, model marks)."""

    def _write_parts(self, parts: GalleryParts, collection: str) -> dict[str, Any]:
        """Write every part of ``parts`` into ``collection`` (:meth:`write`, upsert by id), each row marked with the
        model that embedded it; the crash points ``store.after_part`` (after each part) and ``store.half_written``
        (after the part that takes the rows written past half; ``store.half_written.<collection>``: only in that
        collection's build) let the fault-injection tests kill a build there.
        Returns the build's ``write_seconds`` (the write calls; a Milvus flush after them is not counted),
        ``rows_written`` and ``model`` (the mark, '' for an assembled store), which the attachment records
        (``extra``)."""
        model, written, total = model_of(parts), 0, len(parts)
        t0 = time.perf_counter()
        for part in parts.parts():
            before, written = written, written + len(part)
            self.write(collection, part, model)
            crash_point("store.after_part")
            if 2 * before < total <= 2 * written:
                crash_point("store.half_written")
                crash_point(f"store.half_written.{collection}")
        return {"write_seconds": time.perf_counter() - t0, "rows_written": written, "model": model}

    def audit(self, out: Path) -> dict[str, int]:
        """What the holder attached in ``out`` holds, read from the database itself: ``rows``, ``duplicates`` (rows
        whose id another row has too) and ``unstamped`` (rows without a generation stamp the attachment counts, or
        without the mark of the model that embedded them where the build knew it: ``extra.model``)."""
        m = StoreManifest.load(Path(out))
        self._facts(m.collection)
        ids, stamps, models = self._columns(m.collection)
        known = np.isin(stamps, np.fromiter(m.counts_by_generation, dtype=np.int64))
        marked = bool(m.extra.get("model"))  # an assembled version (a partial backfill's mix) knows no model
        unmarked = np.array([marked and not mark for mark in models], dtype=bool).reshape(len(ids))
        return {
            "rows": len(ids),
            "duplicates": int(len(ids) - len(np.unique(ids))),
            "unstamped": int((~known | unmarked).sum()),
        }

    @abstractmethod
    def _facts(self, collection: str) -> dict[str, Any]:
        """The holder's ``generation`` and ``dim`` (IndexIntegrityError where it does not exist)."""

    @abstractmethod
    def _total(self, collection: str, expect: int | None = None) -> int:
        """The holder's row count. ``expect``: the count the attachment records; a store may confirm it from the
        database's own statistics (no scan) and count exactly only when they disagree."""

    @abstractmethod
    def _count(self, collection: str, generation: int) -> int:
        """The holder's rows stamped ``generation``."""

    @abstractmethod
    def _stamps_outside(self, collection: str, generations: list[int]) -> list[int]:
        """The stamps of the holder's rows stamped with none of ``generations``, one per row."""

    def _counts(self, collection: str, generations: list[int], total: int | None = None) -> dict[int, int]:
        """The holder's rows per generation stamp (``generations``: the ones expected). With its ``total`` row count
        known, rows of other stamps are looked for only when the expected ones do not add up to it."""
        out = {int(g): n for g in generations if (n := self._count(collection, int(g)))}
        if total is None or sum(out.values()) != total:
            for g in self._stamps_outside(collection, [int(g) for g in generations]):
                out[int(g)] = out.get(int(g), 0) + 1
        return out

    @abstractmethod
    def _searchable(self, manifest: StoreManifest) -> DatabaseIndex:
        """The attached version as a searchable :class:`DatabaseIndex`."""

    @abstractmethod
    def live_collection(self, like: str) -> str | None:
        """The holder the live alias of ``like``'s gallery points at (None: no alias yet)."""

    def open(self, out: Path) -> DatabaseIndex:
        return self._searchable(self._rows_match(out))

    def count_by_generation(self, out: Path) -> dict[int, int]:
        m = StoreManifest.load(Path(out))
        self._facts(m.collection)
        return self._counts(m.collection, sorted(m.counts_by_generation))

    def _rows_match(self, out: Path) -> StoreManifest:
        """The light check of every open and alias move: the holder exists with the attachment's generation and
        width and holds its row count (rows per generation: :meth:`verify`)."""
        m = StoreManifest.load(Path(out))
        facts = self._facts(m.collection)
        if facts["dim"] != m.dim or facts["generation"] != m.generation:
            raise IndexIntegrityError(
                f"the {self.holder} {m.collection} holds generation {facts['generation']} at width {facts['dim']}, "
                f"{out}/manifest.json says generation {m.generation} at width {m.dim}; rebuild that gallery version"
            )
        total = self._total(m.collection, expect=m.count)
        if total != m.count:
            raise IndexIntegrityError(
                f"the {self.holder} {m.collection} holds {total} rows, {out}/manifest.json says {m.count}; "
                "rebuild that gallery version (bctflow backfill)"
            )
        return m

    def verify(self, out: Path, *, by_generation: bool = True) -> None:
        m = self._rows_match(out)  # the holder holds m.count rows
        if not by_generation:
            return
        counts = self._counts(m.collection, sorted(m.counts_by_generation), total=m.count)
        if counts != m.counts_by_generation:
            raise IndexIntegrityError(
                f"the {self.holder} {m.collection} holds rows per generation {counts}, {out}/manifest.json says "
                f"{m.counts_by_generation}; rebuild that gallery version (bctflow backfill)"
            )

    def _alias_target(self, out: Path, known_generations: tuple[int, ...] | list[int]) -> StoreManifest:
        """The attachment the live alias may move to: a generation the lineage knows, its rows as attached."""
        m = StoreManifest.load(Path(out))
        if m.generation not in set(known_generations):
            raise IndexIntegrityError(
                f"the {self.holder} {m.collection} holds generation {m.generation}'s gallery, which the lineage does "
                "not know; the live alias stays where it is (point it only at a committed generation's version)"
            )
        self._rows_match(out)
        return m

    def aliased(self, out: Path) -> bool:
        m = StoreManifest.load(Path(out))
        return self.live_collection(m.collection) == m.collection
