"""What every database store shares (docs/design.md §8.4): the connection's plan-time check, and a collection's
build, writes, checks, audit, alias moves and retention against its attachment.

A database store (``milvus``, ``lancedb``) is a :class:`DatabaseStore`: a connection to a database that holds one
*holder* (:attr:`DatabaseStore.holder`: a Milvus collection, a LanceDB table) of :data:`~components.indexing.stores.
db_rows.GALLERY_ROW` rows per gallery version, and a live alias naming one of them. Its collections are
:class:`DatabaseCollection`\\ s: the build (write every part, upsert by id; finish; index; measure recall; attach,
recording the holder's state last), the light check of every open (the holder's rows, generation and width as
attached), the switch's check, whose calls do not grow with the rows (the holder's description and recorded state:
:meth:`DatabaseCollection.unchanged_since_built`, what an alias move checks), the full verify (rows per generation
stamp), the audit and the drop are written here once; a store supplies the database calls
(:meth:`DatabaseCollection._described`, :meth:`~DatabaseCollection._create`, :meth:`~DatabaseCollection._upsert`,
:meth:`~DatabaseCollection._index`, the counts and reads, :meth:`~DatabaseCollection._searchable`,
:meth:`~DatabaseCollection._move_alias`, :meth:`~DatabaseCollection._holder_state`).
"""

from __future__ import annotations

import importlib
import time
from abc import abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from components.errors import ConfigError, IndexIntegrityError
from components.faults import crash_point
from components.geometry import Space
from components.indexing.backend import Collection, IndexOptions, VectorStore
from components.indexing.parts import GalleryParts, StoredPart
from components.indexing.stores.db_index import DatabaseIndex, StoreManifest, measure_recall
from components.indexing.stores.db_rows import (
    alias_name,
    check_row_schema,
    facts_of,
    model_of,
    row_kinds,
    space_of,
    stored_rows,
)

__all__ = ["DatabaseCollection", "DatabaseStore"]


class DatabaseStore(VectorStore):
    """A connection to a database holding one :attr:`holder` per gallery version. A store names its
    :attr:`package` and how to :attr:`install` it, the :attr:`uri_forms` it takes, its collections'
    :attr:`collection_type`, and answers :meth:`_answer` (one cheap call) and :meth:`live_collection`."""

    holder: ClassVar[str] = "collection"
    package: ClassVar[str]
    install: ClassVar[str]
    uri_forms: ClassVar[str]
    collection_type: ClassVar[type[DatabaseCollection]]

    def check(self) -> None:
        """The store's package imports, :attr:`uri` is given and the database answers; ConfigError in one line."""
        self._require(self.package, f"gallery.store {self.name} needs the {self.package} package")
        self._uri()
        self._check_local()
        try:
            self._answer()
        except ConfigError:  # already the one line (a Milvus Lite file another process holds)
            raise
        except Exception as err:  # any failure to answer is one line
            first = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
            raise ConfigError(self._unanswered(first)) from None

    def _require(self, package: str, why: str) -> None:
        try:
            importlib.import_module(package)
        except ImportError:
            raise ConfigError(f"{why}: {self.install}") from None

    def _uri(self) -> str:
        if not self.uri:
            raise ConfigError(f"gallery.store {self.name} needs gallery.uri: {self.uri_forms}")
        return str(self.uri)

    def _check_local(self) -> None:
        """What a local :attr:`uri` needs besides the package (Milvus Lite: its own package)."""

    @abstractmethod
    def _answer(self) -> None:
        """One cheap call the database must answer (list its collections)."""

    @abstractmethod
    def _unanswered(self, first: str) -> str:
        """The one line for a database that did not answer with ``first`` (the first line of its error)."""

    @abstractmethod
    def live_collection(self, like: str) -> str | None:
        """The holder the live alias of ``like``'s gallery points at (None: no alias yet)."""

    def collection(self, name: str | None, out: Path) -> DatabaseCollection:
        if name is None:
            raise IndexIntegrityError(f"{out}/manifest.json names no {self.holder}; rebuild that gallery version")
        return self.collection_type(self, name, out)


class DatabaseCollection(Collection):
    """One gallery version's holder in a database, and its attachment (:class:`StoreManifest`) in :attr:`out`."""

    store: DatabaseStore
    name: str

    def __init__(self, store: DatabaseStore, name: str, out: Path) -> None:
        super().__init__(store, name, out)
        self._manifest: StoreManifest | None = None

    @property
    def what(self) -> str:
        """The holder, as messages name it: ``Milvus collection <name>``."""
        return f"{self.store.holder} {self.name}"

    @property
    def manifest(self) -> StoreManifest:
        """The attachment in :attr:`out`, read once (IndexIntegrityError where it is missing or damaged)."""
        if self._manifest is None:
            self._manifest = StoreManifest.load(self.out)
        return self._manifest

    # ---------------------------------------------------------- the database's side
    @abstractmethod
    def _exists(self) -> bool:
        """Whether the holder exists."""

    @abstractmethod
    def _described(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(the holder's facts — :func:`~components.indexing.stores.db_rows.facts_of` —, its columns: name → kind);
        IndexIntegrityError where it does not exist."""

    @abstractmethod
    def _create(self, facts: dict[str, Any]) -> None:
        """Create the holder of :data:`~components.indexing.stores.db_rows.GALLERY_ROW` rows, recording ``facts``."""

    @abstractmethod
    def _remove(self) -> None:
        """Drop the holder and its rows."""

    @abstractmethod
    def _upsert(self, ids: np.ndarray, stamps: np.ndarray, marks: list[str], rows: np.ndarray) -> None:
        """Upsert rows by id: ``ids`` and ``stamps`` int64 (n,), the model ``marks``, float32 ``rows`` (n, D)."""

    def _written(self, facts: dict[str, Any]) -> int:
        """The rows the holder holds once a build's writes are done (a store may finish them first)."""
        return self._total()

    @abstractmethod
    def _index(self, space: Space, n: int) -> tuple[str, dict[str, Any]]:
        """Build the holder's vector index over ``n`` rows of ``space``; (its type, the parameters recorded)."""

    @abstractmethod
    def _total(self, expect: int | None = None) -> int:
        """The holder's row count. ``expect``: the count the attachment records; a store may confirm it from the
        database's own statistics (no scan) and count exactly only when they disagree."""

    @abstractmethod
    def _count(self, generation: int) -> int:
        """The holder's rows stamped ``generation``."""

    @abstractmethod
    def _stamps_outside(self, generations: list[int]) -> list[int]:
        """The stamps of the holder's rows stamped with none of ``generations``, one per row."""

    @abstractmethod
    def _columns(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Every row the holder has, as the database returns it: (ids, generation stamps, model marks)."""

    @abstractmethod
    def _searchable(self, manifest: StoreManifest) -> DatabaseIndex:
        """The attached version as a searchable :class:`DatabaseIndex`."""

    @abstractmethod
    def _move_alias(self) -> None:
        """Point the store's live alias at this holder."""

    def _holder_state(self) -> dict[str, Any]:
        """The holder's state as the database tells it in one call whose cost does not grow with its rows (LanceDB:
        its table version, which every write moves), recorded in the attachment when the build ends (``extra.holder``)
        and compared at every switch (:meth:`unchanged_since_built`). Default: ``{}``, a database that tells nothing
        of the kind — its switches check the holder's existence, facts and columns only."""
        return {}

    # ---------------------------------------------------------------- writes
    def _facts(self) -> dict[str, Any]:
        """The holder's facts, once its columns are the declared gallery row's (checked at every open)."""
        facts, columns = self._described()
        check_row_schema(self.what, columns)
        return facts

    def write(self, part: StoredPart, model: str = "") -> None:
        """Upsert the stamped rows of ``part`` by id, each marked with ``model`` (``g<N>`` for another generation's
        row). Refused with one line, nothing written: the holder does not exist, is the live one, or the rows are of
        another width or geometry, or stamped with a generation it does not accept
        (:func:`~components.indexing.stores.db_rows.stored_rows`)."""
        self._upsert(*self._prepared(part, model))

    def _prepared(self, part: StoredPart, model: str) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
        """``part`` as the holder stores it: (ids, stamps, marks, rows), checked (:meth:`write`)."""
        facts = self._facts()
        rows = stored_rows(self.what, facts, part, live=self.aliased())
        stamps = part.stamps.astype(np.int64)
        marks = [model if s == facts["generation"] else f"g{s}" for s in stamps.tolist()]
        return part.gallery.ids.astype(np.int64), stamps, marks, rows

    # ---------------------------------------------------------------- the bulk path
    #: rows per commit of the bulk path (whole parts are grouped up to about this many)
    bulk_rows: ClassVar[int] = 1 << 20

    def _append(self, rows: list[tuple[np.ndarray, np.ndarray, list[str], np.ndarray]]) -> None:
        """Append the prepared parts ``rows`` to the holder as one atomic commit (all of them or none, also under
        SIGKILL). A store with such a bulk path overrides this and :meth:`_marks`."""
        raise NotImplementedError

    @property
    def _has_bulk_path(self) -> bool:
        return type(self)._append is not DatabaseCollection._append

    def _bulk_prefix(self, parts: GalleryParts, model: str) -> int | None:
        """How many of ``parts``' rows the holder already holds as a prefix of whole parts that an earlier, killed
        build appended (0: an empty holder): its row count is a part boundary, the prefix's first and last rows are
        there with this model's marks and the next part's first row is not. None where the bulk path cannot resume
        it — no bulk path, rows that are not such a prefix (another model's) — and every part is upserted instead."""
        if not self._has_bulk_path:
            return None
        held = self._total()
        if held == 0:
            return 0
        bounds = np.cumsum([0, *parts.part_sizes()])
        k = int(np.searchsorted(bounds, held))
        if k >= len(bounds) or bounds[k] != held:
            return None
        want: dict[int, str] = {}  # the prefix's first and last rows, with this model's marks
        for i in dict.fromkeys((0, k - 1)):
            ids, _, marks, _ = self._prepared(next(parts.parts(i)), model)
            want |= {int(ids[0]): marks[0], int(ids[-1]): marks[-1]}
        absent = [int(next(parts.parts(k)).gallery.ids[0])] if k < len(bounds) - 1 else []  # the next part's first
        return held if self._marks([*want, *absent]) == want else None

    def _marks(self, ids: list[int]) -> dict[int, str]:
        """The model mark of each of the holder's rows whose id is in ``ids`` (the bulk path's resume check)."""
        raise NotImplementedError

    def create(self, facts: dict[str, Any]) -> None:
        """Create the empty holder of rows with these :func:`~components.indexing.stores.db_rows.facts_of`, where it
        does not exist (a build does; rows are then written part by part, :meth:`write`)."""
        if not self._exists():
            self._create(facts)

    def _write_parts(self, parts: GalleryParts) -> dict[str, Any]:
        """Write every part of ``parts``, each row marked with the model that embedded it: by the store's bulk path
        where it has one and the holder is empty or holds a prefix of whole parts the bulk path appended (groups of
        whole parts, about :attr:`bulk_rows` rows, each one atomic commit: a killed build leaves whole groups, and the
        next build appends from there); else part by part, upserted by id (:meth:`write`). The crash points
        ``store.after_part`` (after each part or group) and ``store.half_written`` (after the write that takes the
        rows written past half; ``store.half_written.<collection>``: only in that collection's build) let the
        fault-injection tests kill a build there. Returns what the attachment records (``extra``): the build's
        ``write_seconds`` (the write calls; a Milvus flush after them is not counted), ``rows_written`` (by this
        build), ``model`` (the mark, '' for an assembled store), ``write_path`` (``bulk`` or ``rows``) and
        ``rows_resumed`` (the bulk path's rows an earlier, killed build had committed)."""
        model, total = model_of(parts), len(parts)
        held = self._bulk_prefix(parts, model)
        t0 = time.perf_counter()
        committed, in_group = held or 0, 0
        sizes = parts.part_sizes()
        first = int(np.searchsorted(np.cumsum(sizes), committed, side="right"))  # the first part not appended yet
        seen = sum(sizes[:first])
        group: list[tuple[np.ndarray, np.ndarray, list[str], np.ndarray]] = []
        for part in parts.parts(first):
            seen += len(part)
            if held is None:
                self.write(part, model)
            else:
                group.append(self._prepared(part, model))
                in_group += len(part)
                if in_group < self.bulk_rows and seen < total:
                    continue
                self._append(group)
                group, in_group = [], 0
            before, committed = committed, seen
            crash_point("store.after_part")
            if 2 * before < total <= 2 * committed:
                crash_point("store.half_written")
                crash_point(f"store.half_written.{self.name}")
        written = committed - (held or 0)
        return {
            "write_seconds": time.perf_counter() - t0,
            "rows_written": written,
            "model": model,
            "write_path": "rows" if held is None else "bulk",
            "rows_resumed": held or 0,
        }

    def build(
        self, parts: GalleryParts, *, generation: int, options: IndexOptions, compatible: list[int] | None = None
    ) -> DatabaseIndex:
        t0 = time.perf_counter()
        facts = facts_of(parts, generation)
        if self._exists():
            if self.aliased():
                raise IndexIntegrityError(
                    f"the {self.what} is the live gallery and is never rebuilt; delete the folder {self.out.parent} "
                    "that names it only after the live alias has moved on"
                )
            if self._described() != (facts, row_kinds()):  # a leftover of an unfinished build for other rows
                self._remove()
        self.create(facts)
        written = self._write_parts(parts)
        if self._written(facts) != len(parts):  # rows of another gallery a killed build left: write it again
            self._remove()
            return self.build(parts, generation=generation, options=options, compatible=compatible)
        kind, params = self._index(space_of(facts), len(parts))
        gens, n = np.unique(parts.column("stamps"), return_counts=True)
        manifest = StoreManifest(
            store=self.store.name, uri=str(self.store.uri), collection=self.name, generation=int(generation),
            geometry=facts["geometry"], curvature=facts["curvature"], dim=facts["dim"], count=len(parts),
            counts_by_generation={int(g): int(c) for g, c in zip(gens, n)}, index_type=kind, params=params,
            compatible_generations=tuple(int(g) for g in (compatible or [generation])),
            extra={"options": self.store.options, "alias": alias_name(self.name), **written},
        )  # fmt: skip
        measured = measure_recall(self._searchable(manifest), parts, options.recall_queries)
        sealed = {**measured.extra, "holder": self._holder_state()}  # last: the state the switches compare with
        replace(measured, build_seconds=time.perf_counter() - t0, extra=sealed).save(self.out)
        self._manifest = None
        return self.open()

    # ---------------------------------------------------------------- reads
    def open(self) -> DatabaseIndex:
        return self._searchable(self._rows_match())

    def _counts(self, generations: list[int], total: int | None = None) -> dict[int, int]:
        """The holder's rows per generation stamp (``generations``: the ones expected). With its ``total`` row count
        known, rows of other stamps are looked for only when the expected ones do not add up to it."""
        out = {int(g): n for g in generations if (n := self._count(int(g)))}
        if total is None or sum(out.values()) != total:
            for g in self._stamps_outside([int(g) for g in generations]):
                out[int(g)] = out.get(int(g), 0) + 1
        return out

    def count_by_generation(self) -> dict[int, int]:
        m = self.manifest
        self._facts()
        return self._counts(sorted(m.counts_by_generation))

    def _as_attached(self) -> StoreManifest:
        """The holder exists with the attachment's generation and width and bctflow's gallery columns (one
        description of it: no row read); the attachment."""
        m = self.manifest
        facts = self._facts()
        if facts["dim"] != m.dim or facts["generation"] != m.generation:
            raise IndexIntegrityError(
                f"the {self.what} holds generation {facts['generation']} at width {facts['dim']}, "
                f"{self.out}/manifest.json says generation {m.generation} at width {m.dim}; rebuild that gallery "
                "version"
            )
        return m

    def unchanged_since_built(self) -> str | None:
        m = self._as_attached()
        built = m.extra.get("holder")
        if built is None:
            return f"{self.out}/manifest.json records no state of the {self.what} (built before bctflow recorded one)"
        now = self._holder_state()
        return None if now == built else f"the {self.what} is at {now}, it was built at {built}"

    def _rows_match(self) -> StoreManifest:
        """The light check of every open (and of a switch the store cannot vouch for in O(1)): the holder as
        attached (:meth:`_as_attached`), holding the attachment's row count (rows per generation: :meth:`verify`)."""
        m = self._as_attached()
        total = self._total(expect=m.count)
        if total != m.count:
            raise IndexIntegrityError(
                f"the {self.what} holds {total} rows, {self.out}/manifest.json says {m.count}; "
                "rebuild that gallery version (bctflow backfill)"
            )
        return m

    def verify(self, *, by_generation: bool = True) -> None:
        m = self._rows_match()  # the holder holds m.count rows
        if not by_generation:
            return
        counts = self._counts(sorted(m.counts_by_generation), total=m.count)
        if counts != m.counts_by_generation:
            raise IndexIntegrityError(
                f"the {self.what} holds rows per generation {counts}, {self.out}/manifest.json says "
                f"{m.counts_by_generation}; rebuild that gallery version (bctflow backfill)"
            )

    def audit(self) -> dict[str, int]:
        """What the holder holds, read from the database itself: ``rows``, ``duplicates`` (rows whose id another row
        has too) and ``unstamped`` (rows without a generation stamp the attachment counts, or without the mark of
        the model that embedded them where the build knew it: ``extra.model``)."""
        m = self.manifest
        self._facts()
        ids, stamps, models = self._columns()
        known = np.isin(stamps, np.fromiter(m.counts_by_generation, dtype=np.int64))
        marked = bool(m.extra.get("model"))  # an assembled version (a partial backfill's mix) knows no model
        unmarked = np.array([marked and not mark for mark in models], dtype=bool).reshape(len(ids))
        return {
            "rows": len(ids),
            "duplicates": int(len(ids) - len(np.unique(ids))),
            "unstamped": int((~known | unmarked).sum()),
        }

    # ---------------------------------------------------------------- alias
    def point_alias(self, known_generations: tuple[int, ...] | list[int]) -> None:
        """Move the live alias here: only to a generation the lineage knows, the holder as attached. Its work does not
        grow with the rows: the holder's description and recorded state (:meth:`unchanged_since_built`); its row
        count only where that state differs from the build's or was never recorded."""
        m = self.manifest
        if m.generation not in set(known_generations):
            raise IndexIntegrityError(
                f"the {self.what} holds generation {m.generation}'s gallery, which the lineage does not know; the live "
                "alias stays where it is (point it only at a committed generation's version)"
            )
        if self.unchanged_since_built() is not None:
            self._rows_match()
        self._move_alias()

    def aliased(self) -> bool:
        return self.store.live_collection(self.name) == self.name

    def drop(self) -> None:
        try:
            _ = self.manifest
        except IndexIntegrityError:
            return  # nothing attached: nothing to drop
        if self._exists() and not self.aliased():
            self._remove()
