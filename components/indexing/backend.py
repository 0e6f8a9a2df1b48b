"""The one seam between bctflow and where a gallery's searchable vectors live (docs/design.md §8.4).

A *vector store* (params ``gallery.store``: ``faiss`` | ``milvus`` | ``lancedb``) is a connection, opened once from
params ``gallery.store`` and ``gallery.uri`` (:func:`vector_store`). As pymilvus's client and LanceDB's connection do,
it hands out *collections* (:meth:`VectorStore.collection`): one gallery version's vectors, which know their name in
the store and the index folder their *attachment* lives in — ``manifest.json``, a
:class:`~components.indexing.manifest.GalleryManifest` whose sha256 the lineage pins. Everything that indexes,
searches, counts by generation, verifies, points the live gallery or drops a version goes through its
:class:`Collection`:

* :meth:`Collection.build` — write every stamped row of a finished part store
  (:class:`~components.indexing.parts.GalleryParts`, the write-ahead form every embedding is written in) idempotently
  (upsert by id), finish, build the index :class:`IndexOptions` asks for (a record in no store's terms), attach it,
  and return the opened :class:`SearchIndex`;
* :meth:`Collection.open`, :meth:`Collection.count_by_generation`, :meth:`Collection.verify`,
  :meth:`Collection.audit` (rows, duplicate ids and unstamped rows as the store itself holds them),
  :meth:`Collection.digest`, :meth:`Collection.facts` (what the lineage records of a live gallery);
* :meth:`Collection.unchanged_since_built` — what a switch asks the store, in calls whose cost does not grow with
  the gallery (no row read);
* :meth:`Collection.point_alias` / :meth:`Collection.aliased` — the store's own live alias (a Milvus alias);
  ``live/CURRENT`` (:mod:`components.indexing.live`) stays bctflow's pointer with the lineage's facts and calls it;
* :meth:`Collection.drop` — retention removes an old version's vectors.

:func:`collection_at` is the collection an attachment names, opened by the store that built it (the manifest's
``store`` key; FAISS files' manifests carry none), so a workspace that changes stores still serves its older
versions; :func:`open_index` and :func:`gallery_facts` read through it.

Stores register in one catalog (:data:`STORES`, one module or package per store in ``components/indexing/stores/``);
:func:`vector_store` opens the one params name. A fourth store is one new module with ``@register_store("name")``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from components.errors import ConfigError, IndexIntegrityError
from components.geometry import Space
from components.indexing.manifest import ATTACHMENT, GalleryManifest, read_attachment
from components.indexing.parts import GalleryParts
from components.io import file_sha256
from components.plugins import Catalog

__all__ = [
    "ATTACHMENT",
    "STORES",
    "Collection",
    "GalleryFacts",
    "IndexOptions",
    "SearchIndex",
    "VectorStore",
    "collection_at",
    "gallery_facts",
    "open_index",
    "register_store",
    "vector_store",
]

STORES: Catalog[type[VectorStore]] = Catalog(
    "gallery store", "components.indexing.stores", ConfigError, "set params gallery.store to one of them"
)


def register_store(name: str) -> Callable[[type[VectorStore]], type[VectorStore]]:
    """Register a :class:`VectorStore` subclass under ``name`` (params ``gallery.store``)."""
    return STORES.register(name)


class SearchIndex(Protocol):
    """What the flows search and read: a built gallery index of one store."""

    @property
    def manifest(self) -> GalleryManifest:
        """generation, geometry, curvature, dim, count, index_type, params, compatible_generations, recall_at_10…"""

    @property
    def ntotal(self) -> int: ...

    def search(
        self, queries: np.ndarray, k: int, *, query_generation: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores float64 (nq, k'), ids int64 (nq, k')), best first; higher = nearer."""

    def with_compatible_generations(self, generations: tuple[int, ...] | list[int]) -> SearchIndex: ...


@dataclass(frozen=True)
class IndexOptions:
    """The index a build asks for, in no store's terms: ``settings``, the index's options by name as params
    ``index:`` gives them (``type``, ``nlist``, ``nprobe``, … — the FAISS files take them all; a database store takes
    none, its own index options are its connection's, params ``gallery.index_options``), and ``recall_queries``, the
    gallery items on which every build measures its recall@10 against exact search."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    recall_queries: int = 1000


@dataclass(frozen=True)
class GalleryFacts:
    """What the lineage records of the vectors a live-gallery pointer names (``gallery_pointers``, revision 0007):
    the store that holds them (params ``gallery.store``), its collection / table (None: FAISS files, which keep the
    vectors in the version folder), the rows per generation stamp as written, and the ANN index: ``{"index_type":
    …, <its parameters>}``."""

    store: str
    collection: str | None
    rows_by_generation: dict[int, int]
    index_params: dict[str, Any]


class VectorStore(ABC):
    """A connection to where galleries' searchable vectors live; one instance per (``uri``, ``options``).

    ``uri``: the store's address (Milvus: a Milvus Lite file or ``http://host:19530``; LanceDB: a folder or an
    object-store URI; FAISS files: none, the index lives in the version folder). ``options``: the store's own index
    options (params ``gallery.index_options``).
    """

    name: ClassVar[str]

    def __init__(self, uri: str | None = None, options: dict[str, Any] | None = None) -> None:
        self.uri = uri
        self.options = dict(options or {})

    def check(self) -> None:  # noqa: B027 - a store may need no check
        """Plan-time check (before any training): the store's package is installed and :attr:`uri` is reachable.
        ConfigError, one line naming the problem and the fix."""

    def check_index(self, options: IndexOptions, space: Space, dim: int, n: int) -> int:
        """Plan-time, before anything is embedded: ConfigError in one line when ``n`` gallery points of width ``dim``
        in ``space`` could not be indexed as ``options`` asks. Returns the width of one stored row (the disk
        estimate's). Default: nothing to refuse; rows of width ``dim``."""
        return dim

    @abstractmethod
    def collection(self, name: str | None, out: Path) -> Collection:
        """The collection ``name`` (the store's name for one gallery version, ``<gallery.name>_g<N>_v<k>``; None
        where the store names none) whose attachment is, or will be once built, in the index folder ``out``."""

    def close(self) -> None:  # noqa: B027
        """Let go of what this process holds open in the store (a Milvus Lite file serves one process at a time)."""


class Collection(ABC):
    """One gallery version's vectors in a store: :attr:`name` there (None: FAISS files, which keep them in the
    version folder) and :attr:`out`, the index folder its attachment lives in."""

    def __init__(self, store: VectorStore, name: str | None, out: Path) -> None:
        self.store = store
        self.name = name
        self.out = Path(out)

    @abstractmethod
    def build(
        self, parts: GalleryParts, *, generation: int, options: IndexOptions, compatible: list[int] | None = None
    ) -> SearchIndex:
        """Write every stamped row of ``parts`` (idempotent: a rerun after a kill ends with one row per id), finish,
        build the index ``options`` asks for, attach it in :attr:`out` (``manifest.json``) and return it opened.
        ``compatible``: the query generations it accepts (default: ``generation``'s own)."""

    @abstractmethod
    def open(self) -> SearchIndex:
        """The index attached in :attr:`out`, checked (the holder, its width and its row total)."""

    @abstractmethod
    def count_by_generation(self) -> dict[int, int]:
        """Rows per generation stamp of the vectors attached in :attr:`out`, as the store holds them now."""

    @abstractmethod
    def verify(self, *, by_generation: bool = True) -> None:
        """The store holds what the attachment says (rows, width, stamps); IndexIntegrityError else.
        ``by_generation=False``: a database store checks the holder, its width and its row total but not its rows
        per generation stamp (a filtered count per generation: 18 s per 1M-row Milvus Lite collection), which
        ``bctflow doctor`` compares; FAISS files check their part store's sha256 pins either way."""

    @abstractmethod
    def audit(self) -> dict[str, int]:
        """What the store holds for the vectors attached in :attr:`out`, read from the store itself: ``rows``,
        ``duplicates`` (rows whose id another row has too) and ``unstamped`` (rows without a generation stamp)."""

    def digest(self) -> str:
        """The sha256 the lineage pins for the index attached in :attr:`out`: of its ``manifest.json``."""
        return file_sha256(self.out / ATTACHMENT)

    def unchanged_since_built(self) -> str | None:
        """What a switch asks the store about these vectors, in calls whose cost does not grow with the rows (no row
        is read or counted): None when the store's own facts show them as built (a database store: the holder
        exists with the attachment's generation, width and columns, and its O(1) state is the one the build
        recorded), else one line saying why they may have changed — the caller then runs the full check
        (:meth:`verify`). IndexIntegrityError where they certainly did (the holder is gone, or holds another
        generation or width). FAISS files: None — their vectors are the version folder's files, which the version's
        seal covers (:mod:`components.indexing.seal`)."""
        return None

    def point_alias(self, known_generations: tuple[int, ...] | list[int]) -> None:  # noqa: B027
        """Move the store's own live alias to these vectors (refused for a generation not in ``known_generations``,
        the lineage's). A store without aliases of its own (FAISS files) has nothing to move: ``live/CURRENT`` is its
        alias."""

    def aliased(self) -> bool:
        """Whether the store's live alias names these vectors (always, for a store without aliases of its own)."""
        return True

    def drop(self) -> None:  # noqa: B027
        """Remove these vectors from the store (retention); files in :attr:`out` are the caller's."""

    def facts(self) -> GalleryFacts:
        """The :class:`GalleryFacts` of the attached index, read from its attachment without opening the index; a
        store whose attachment does not list its rows per generation (FAISS files: the stamps stay in the part
        store) counts them (:meth:`count_by_generation`)."""
        body = read_attachment(self.out)
        if body is None:
            raise IndexIntegrityError(
                f"{self.out / ATTACHMENT} is missing or damaged: the index was never attached; rebuild the gallery"
            )
        counts = body.get("counts_by_generation")
        rows = {int(g): int(n) for g, n in counts.items()} if isinstance(counts, dict) else self.count_by_generation()
        index = {**(body.get("params") or {}), "index_type": body.get("index_type")}
        return GalleryFacts(self.store.name, body.get("collection"), rows, index)


def vector_store(name: str, uri: str | None = None, options: dict[str, Any] | None = None) -> VectorStore:
    """The store params ``gallery.store`` names (ConfigError listing the stores for an unknown one)."""
    return STORES.get(name)(uri, options)


def collection_at(out: str | Path) -> Collection:
    """The collection attached in ``out``, of the store that built it (its manifest's ``store``, ``uri``,
    ``collection`` and options; FAISS files' manifests carry none)."""
    body = read_attachment(Path(out)) or {}
    store = vector_store(str(body.get("store", "faiss")), body.get("uri"), (body.get("extra") or {}).get("options"))
    return store.collection(body.get("collection"), Path(out))


def open_index(out: str | Path) -> SearchIndex:
    """The index attached in ``out``, opened by the store that built it and checked."""
    return collection_at(out).open()


def gallery_facts(out: str | Path) -> GalleryFacts:
    """The :class:`GalleryFacts` of the index attached in ``out``, whichever store built it
    (:meth:`Collection.facts`)."""
    return collection_at(out).facts()
