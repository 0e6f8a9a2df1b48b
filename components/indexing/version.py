"""One gallery version on disk: the evaluation gallery, the serving corpus, and which of them serves.

A *gallery version* is the folder a generation embeds its galleries into (``generations/gen_NNN``) or a backfill
publishes (``live/index-vNNN``); the lineage names it by its evaluation index (``index_path``). It holds

* the **evaluation gallery** — the labelled evaluation split embedded by the version's model, on which every
  generation is measured (docs/design.md §6, §7.3): its part store ``gallery/`` and index ``index/``;
* the **serving corpus**, when params ``gallery:`` name one (docs/design.md §7.10): its part store
  ``corpus/gallery/`` and index ``corpus/index/``;
* ``serving.json`` — which of the two answers queries, recorded once when the version is built (from params
  ``gallery.source``): ``{"source": <gallery.source>, "index": <folder>, "gallery": <folder>}``, relative to the
  version. The live pointer (:mod:`components.indexing.live`) copies it into ``live/CURRENT``.

Versions written before part stores hold the evaluation gallery as one ``gallery.npz`` (stamps in ``stamps.npy``);
versions written before ``serving.json`` served their corpus index when they had one (:meth:`GalleryVersion.serving`
reads them so, the only place that looks).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from components.errors import IndexIntegrityError
from components.io import atomic_write_text

__all__ = ["EVAL_SPLIT", "SERVING_FILE", "GalleryVersion", "Serving"]

SERVING_FILE = "serving.json"
#: params ``gallery.source`` when the evaluation split is the served gallery
EVAL_SPLIT = "eval_split"
_STORE, _INDEX, _CORPUS, _LEGACY = "gallery", "index", "corpus", "gallery.npz"


@dataclass(frozen=True)
class Serving:
    """What a version serves: ``source`` (params ``gallery.source``), its part store and its index (absolute)."""

    source: str
    gallery: Path
    index: Path

    @property
    def corpus(self) -> bool:
        """True when a corpus of its own serves (not the evaluation split)."""
        return self.source != EVAL_SPLIT


@dataclass(frozen=True)
class GalleryVersion:
    """The galleries of the version folder ``root`` (see the module docstring)."""

    root: Path

    @classmethod
    def of_index(cls, index_path: str | Path) -> GalleryVersion:
        """The version whose evaluation index is ``index_path`` (a lineage ``index_path``)."""
        return cls(Path(index_path).parent)

    @property
    def number(self) -> int:
        """The version's number: k of ``live/index-v<k>`` (a backfill's), 0 for a generation's own folder; the
        store's collections are named by it (``<name>_g<N>_v<k>``) and ``bctflow rollback --to`` takes it."""
        k = self.root.name.removeprefix("index-v")
        return int(k) if self.root.name.startswith("index-v") and k.isdigit() else 0

    @classmethod
    def serving_index_of(cls, index_path: str | Path) -> Path:
        """The index that answers queries for the version whose evaluation index is ``index_path``: its serving
        corpus's index when it serves one (:meth:`serving`), else ``index_path`` itself."""
        serving = cls.of_index(index_path).serving()
        return serving.index if serving.corpus else Path(index_path)

    @property
    def evaluation_store(self) -> Path:
        """Where the version writes its evaluation gallery's part store (``gallery/``)."""
        return self.root / _STORE

    def evaluation_gallery(self) -> Path:
        """The evaluation gallery to read: the part store, or the ``gallery.npz`` of a version written before part
        stores (:class:`~components.indexing.parts.GalleryParts` reads either)."""
        legacy = self.root / _LEGACY
        return legacy if legacy.is_file() and not self.evaluation_store.is_dir() else self.evaluation_store

    @property
    def evaluation_index(self) -> Path:
        return self.root / _INDEX

    @property
    def corpus_store(self) -> Path:
        return self.root / _CORPUS / _STORE

    @property
    def corpus_index(self) -> Path:
        return self.root / _CORPUS / _INDEX

    def store(self, corpus: bool) -> Path:
        """The part store of the serving corpus (``corpus``) or of the evaluation gallery."""
        return self.corpus_store if corpus else self.evaluation_store

    def index(self, corpus: bool) -> Path:
        return self.corpus_index if corpus else self.evaluation_index

    def record_serving(self, source: str) -> Serving:
        """Record that the version serves ``source`` (params ``gallery.source``): its corpus, or the evaluation
        split. Its store and index must exist already."""
        corpus = source != EVAL_SPLIT
        store, index = self.store(corpus), self.index(corpus)
        if not index.is_dir():
            raise IndexIntegrityError(f"{index} is missing: build the index before recording that it serves")
        body = {
            "source": source,
            "gallery": store.relative_to(self.root).as_posix(),
            "index": index.relative_to(self.root).as_posix(),
        }
        atomic_write_text(self.root / SERVING_FILE, json.dumps(body, indent=1) + "\n")
        return Serving(source, store, index)

    def serving(self) -> Serving:
        """What the version serves, as recorded; a version written before the record served its corpus index when
        it held one, else its evaluation index."""
        path = self.root / SERVING_FILE
        if path.is_file():
            try:
                body = json.loads(path.read_text())
                return Serving(str(body["source"]), self.root / body["gallery"], self.root / body["index"])
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise IndexIntegrityError(
                    f"{path} is damaged ({err}); restore the gallery version {self.root} from a backup"
                ) from None
        if self.corpus_index.is_dir():  # written before serving.json: its corpus served
            return Serving("corpus", self.corpus_store, self.corpus_index)
        return Serving(EVAL_SPLIT, self.evaluation_gallery(), self.evaluation_index)
