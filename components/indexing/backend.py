"""The one seam between bctflow and where a gallery's searchable vectors live (docs/design.md §8.4).

A *vector store* (params ``gallery.store``: ``faiss`` | ``milvus`` | …) takes a finished part store of stamped
vectors (:class:`~components.indexing.parts.GalleryParts`, the write-ahead form every embedding is written in,
resumably) and makes it searchable: it writes every stamped row (idempotently: upsert by id), finishes, builds or
attaches its ANN index, and leaves an *attachment* in the gallery version's index folder — ``manifest.json``, whose
sha256 the lineage pins as it always did. Everything that indexes, searches, counts by generation, verifies or
points the live gallery goes through :class:`VectorStore`:

* :meth:`VectorStore.build` — write, finish, index, attach (``out``); returns the opened :class:`SearchIndex`;
* :func:`open_index` — the index an attachment names, verified (:meth:`VectorStore.open`), whichever store built it
  (the manifest's ``store`` key; FAISS manifests carry none), so a workspace that changes stores still serves its
  older versions;
* :meth:`VectorStore.count_by_generation`, :meth:`VectorStore.verify`, :meth:`VectorStore.digest`;
  :meth:`VectorStore.audit` — rows, duplicate ids and unstamped rows as the store itself holds them;
* :func:`gallery_facts` — what the lineage records of a live gallery (store, collection, rows per generation, index
  parameters), read from the attachment whichever store built it;
* :meth:`VectorStore.point_alias` / :meth:`VectorStore.aliased` — the store's own live alias (a Milvus alias);
  ``live/CURRENT`` (:mod:`components.indexing.live`) stays bctflow's pointer with the lineage's facts and calls it;
* :meth:`VectorStore.drop` — retention removes an old version's vectors.

Stores register in one catalog (:data:`STORES`, one module per store in ``components/indexing/stores/``);
:func:`vector_store` opens the one params name. A fourth store is one new module with ``@register_store("name")``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from components.errors import ConfigError, IndexIntegrityError
from components.geometry import Space, create_space
from components.indexing.index_config import IndexConfig
from components.indexing.parts import GalleryParts
from components.io import atomic_write_text, file_sha256
from components.plugins import Catalog

__all__ = [
    "ATTACHMENT",
    "STORES",
    "GalleryFacts",
    "SearchIndex",
    "StoreManifest",
    "VectorStore",
    "gallery_facts",
    "open_index",
    "register_store",
    "store_of",
    "vector_store",
]

#: the file in a version's index folder that names its searchable vectors (FAISS: the index manifest itself)
ATTACHMENT = "manifest.json"

STORES: Catalog[type[VectorStore]] = Catalog(
    "gallery store", "components.indexing.stores", ConfigError, "set params gallery.store to one of them"
)


def register_store(name: str) -> Callable[[type[VectorStore]], type[VectorStore]]:
    """Register a :class:`VectorStore` subclass under ``name`` (params ``gallery.store``)."""
    return STORES.register(name)


class SearchIndex(Protocol):
    """What the flows search and read: a built gallery index of one store."""

    @property
    def manifest(self) -> Any:
        """generation, geometry, curvature, dim, count, index_type, params, compatible_generations, recall_at_10…"""

    @property
    def ntotal(self) -> int: ...

    def search(
        self, queries: np.ndarray, k: int, *, query_generation: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(scores float64 (nq, k'), ids int64 (nq, k')), best first; higher = nearer."""

    def with_compatible_generations(self, generations: tuple[int, ...] | list[int]) -> SearchIndex: ...


@dataclass(frozen=True)
class StoreManifest:
    """The attachment a database store writes: which collection holds the version's vectors and what it holds.

    The fields the flows read of an index manifest (``generation``, ``compatible_generations``, ``index_type``,
    ``recall_at_10`` …) have the same names as :class:`~components.indexing.manifest.IndexManifest`'s."""

    store: str
    uri: str
    collection: str
    generation: int
    geometry: str
    curvature: float
    dim: int
    count: int
    counts_by_generation: dict[int, int]
    index_type: str
    params: dict[str, Any]
    compatible_generations: tuple[int, ...]
    recall_at_10: float | None = None
    recall_queries: int = 0
    search_qps: float | None = None
    build_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def space(self) -> Space:
        """The space of the stored points, made from the stored ``geometry`` and ``curvature``."""
        return create_space(self.geometry, self.curvature)

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        body = {**asdict(self), "counts_by_generation": {str(g): n for g, n in self.counts_by_generation.items()}}
        atomic_write_text(directory / ATTACHMENT, json.dumps(body, indent=1, sort_keys=True) + "\n")
        return directory / ATTACHMENT

    @classmethod
    def load(cls, directory: Path) -> StoreManifest:
        path = Path(directory) / ATTACHMENT
        try:
            body = json.loads(path.read_text())
            body["counts_by_generation"] = {int(g): int(n) for g, n in body["counts_by_generation"].items()}
            body["compatible_generations"] = tuple(int(g) for g in body["compatible_generations"])
            return cls(**body)
        except FileNotFoundError:
            raise IndexIntegrityError(f"{path} is missing: the index was never attached; rebuild the gallery") from None
        except (ValueError, KeyError, TypeError) as err:
            raise IndexIntegrityError(
                f"{path} is damaged ({type(err).__name__}); restore its folder from a backup or rebuild the gallery"
            ) from None

    def with_compatible(self, generations: tuple[int, ...] | list[int]) -> StoreManifest:
        return replace(self, compatible_generations=tuple(int(g) for g in generations))


class VectorStore(ABC):
    """Where a gallery's searchable vectors live; one instance per (``uri``, ``options``).

    ``uri``: the store's address (Milvus: a Milvus Lite file or ``http://host:19530``; FAISS files: none, the
    index lives in the version folder). ``options``: the store's index options (params ``gallery.index_options``).
    """

    name: ClassVar[str]

    def __init__(self, uri: str | None = None, options: dict[str, Any] | None = None) -> None:
        self.uri = uri
        self.options = dict(options or {})

    def check(self) -> None:  # noqa: B027 - a store may need no check
        """Plan-time check (before any training): the store's package is installed and :attr:`uri` is reachable.
        ConfigError, one line naming the problem and the fix."""

    @abstractmethod
    def build(
        self,
        parts: GalleryParts,
        out: Path,
        *,
        collection: str,
        generation: int,
        config: IndexConfig,
        compatible: list[int] | None = None,
    ) -> SearchIndex:
        """Write every stamped row of ``parts`` (idempotent: a rerun after a kill ends with one row per id), finish,
        build the ANN index of ``config``, attach it in ``out`` (``manifest.json``) and return it opened.
        ``collection``: the store's name for this version (``<name>_g<N>_v<k>``)."""

    @abstractmethod
    def open(self, out: Path) -> SearchIndex:
        """The index attached in ``out``, verified (:meth:`verify`)."""

    @abstractmethod
    def count_by_generation(self, out: Path) -> dict[int, int]:
        """Rows per generation stamp of the vectors attached in ``out``, as the store holds them now."""

    @abstractmethod
    def verify(self, out: Path, *, by_generation: bool = True) -> None:
        """The store holds what the attachment in ``out`` says (rows, width, stamps); IndexIntegrityError else.
        ``by_generation=False``: a database store checks the holder, its width and its row total but not its rows
        per generation stamp (a filtered count per generation: 18 s per 1M-row Milvus Lite collection), which
        ``bctflow doctor`` compares; FAISS files check their part store's sha256 pins either way."""

    @abstractmethod
    def audit(self, out: Path) -> dict[str, int]:
        """What the store holds for the vectors attached in ``out``, read from the store itself: ``rows``,
        ``duplicates`` (rows whose id another row has too) and ``unstamped`` (rows without a generation stamp)."""

    def digest(self, out: Path) -> str:
        """The sha256 the lineage pins for the index attached in ``out``: of its ``manifest.json``."""
        return file_sha256(Path(out) / ATTACHMENT)

    def point_alias(self, out: Path, known_generations: tuple[int, ...] | list[int]) -> None:  # noqa: B027
        """Move the store's own live alias to the vectors attached in ``out`` (refused for a generation not in
        ``known_generations``, the lineage's). A store without aliases of its own (FAISS files) has nothing to
        move: ``live/CURRENT`` is its alias."""

    def aliased(self, out: Path) -> bool:
        """Whether the store's live alias names the vectors attached in ``out`` (always, for a store without
        aliases of its own)."""
        return True

    def close(self) -> None:  # noqa: B027
        """Let go of what this process holds open in the store (a Milvus Lite file serves one process at a time)."""

    def drop(self, out: Path) -> None:  # noqa: B027
        """Remove the vectors attached in ``out`` from the store (retention); files in ``out`` are the caller's."""


def vector_store(name: str, uri: str | None = None, options: dict[str, Any] | None = None) -> VectorStore:
    """The store params ``gallery.store`` names (ConfigError listing the stores for an unknown one)."""
    return STORES.get(name)(uri, options)


def _attachment(out: Path) -> dict[str, Any] | None:
    path = Path(out) / ATTACHMENT
    try:
        body = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None  # the store's own open reports a missing or damaged file
    return body if isinstance(body, dict) else None


def store_of(out: Path) -> VectorStore:
    """The store that built the index attached in ``out`` (its manifest's ``store``; FAISS files carry none)."""
    body = _attachment(out) or {}
    name = str(body.get("store", "faiss"))
    return vector_store(name, body.get("uri"), body.get("extra", {}).get("options"))


def open_index(out: str | Path) -> SearchIndex:
    """The index attached in ``out``, opened by the store that built it and verified."""
    return store_of(Path(out)).open(Path(out))


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


def gallery_facts(out: str | Path) -> GalleryFacts:
    """The :class:`GalleryFacts` of the index attached in ``out``, whichever store built it: read from its attachment
    (``manifest.json``), without opening the index; a store whose attachment does not list its rows per generation
    (FAISS files: the stamps stay in the part store) counts them (:meth:`VectorStore.count_by_generation`)."""
    out = Path(out)
    body = _attachment(out)
    if body is None:
        raise IndexIntegrityError(
            f"{out / ATTACHMENT} is missing or damaged: the index was never attached; rebuild the gallery"
        )
    vectors = store_of(out)
    counts = body.get("counts_by_generation")
    rows = {int(g): int(n) for g, n in counts.items()} if isinstance(counts, dict) else vectors.count_by_generation(out)
    index = {**(body.get("params") or {}), "index_type": body.get("index_type")}
    return GalleryFacts(vectors.name, body.get("collection"), rows, index)
