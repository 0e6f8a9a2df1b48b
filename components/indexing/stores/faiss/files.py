"""``gallery.store: faiss`` — the gallery's vectors in FAISS files inside the version folder (the embedded default).

:meth:`FaissCollection.build` streams the part store into a
:class:`~components.indexing.stores.faiss.gallery_index.GalleryIndex` (one pass for flat, two for the approximate
types) of the :class:`~components.indexing.stores.faiss.index_config.IndexConfig` the seam's
:class:`~components.indexing.backend.IndexOptions` name (:func:`index_config`), saves it in the index folder
(``index.faiss`` + its ``manifest.json``, the attachment the lineage pins) and loads it back, verified. The
generation stamps stay in the part store beside the index (``gallery/`` next to ``index/``), where
:meth:`FaissCollection.count_by_generation` reads them. The live alias is ``live/CURRENT`` itself: FAISS files keep
none of their own, and a collection has no name of its own (its folder is it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from components.errors import IndexIntegrityError
from components.geometry import Space
from components.indexing.backend import Collection, IndexOptions, VectorStore, register_store
from components.indexing.parts import GalleryParts
from components.indexing.stores.faiss.gallery_index import MANIFEST_FILE, GalleryIndex
from components.indexing.stores.faiss.index_config import IndexConfig
from components.indexing.stores.faiss.manifest import IndexManifest

__all__ = ["FaissCollection", "FaissFiles", "index_config"]


def index_config(options: IndexOptions) -> IndexConfig:
    """The FAISS index ``options`` asks for (params ``index:``); ConfigError naming a field FAISS does not know."""
    return IndexConfig.from_dict({**options.settings, "recall_queries": options.recall_queries})


def _stamps_store(out: Path, generation: int) -> GalleryParts:
    """The part store beside the index folder ``out`` (``gallery/``; ``gallery.npz`` in a version written before
    part stores)."""
    folder, legacy = out.parent / "gallery", out.parent / "gallery.npz"
    return GalleryParts(legacy if legacy.is_file() and not folder.is_dir() else folder, generation=generation)


@register_store("faiss")
class FaissFiles(VectorStore):
    """FAISS index files in the gallery version's folder (``uri`` unused)."""

    name = "faiss"

    def collection(self, name: str | None, out: Path) -> FaissCollection:
        return FaissCollection(self, name, out)

    def check_index(self, options: IndexOptions, space: Space, dim: int, n: int) -> int:
        """What :meth:`GalleryIndex.build <components.indexing.stores.faiss.gallery_index.GalleryIndex.build>`
        would refuse for ``n`` points (nlist, pq_m, pq_nbits against the gallery), refused now; the width FAISS
        stores (one more for a Lorentz gallery in the ``mips_l2`` form)."""
        config = index_config(options)
        config.check_buildable(space, dim, n)
        return config.stored_width(space, dim)


class FaissCollection(Collection):
    """One gallery version's FAISS files: ``index.faiss`` (or its shards) and ``manifest.json`` in :attr:`out`."""

    def build(
        self, parts: GalleryParts, *, generation: int, options: IndexOptions, compatible: list[int] | None = None
    ) -> GalleryIndex:
        GalleryIndex.build_streaming(
            parts.index_chunks(),
            space=next(parts.parts()).gallery.retrieval_space,
            generation=generation,
            config=index_config(options),
            compatible_generations=compatible,
        ).save(self.out)
        return self.open()

    def open(self) -> GalleryIndex:
        return GalleryIndex.load(self.out)

    def count_by_generation(self) -> dict[int, int]:
        # the manifest names the generation; the stamps are the part store's (the index file itself is not read)
        try:
            manifest = IndexManifest.from_json((self.out / MANIFEST_FILE).read_bytes())
        except OSError as err:
            raise IndexIntegrityError(f"{self.out / MANIFEST_FILE} cannot be read ({err}); rebuild the index") from None
        stamps = _stamps_store(self.out, manifest.generation).column("stamps")
        gens, counts = np.unique(stamps, return_counts=True)
        return {int(g): int(c) for g, c in zip(gens, counts)}

    def verify(self, *, by_generation: bool = True) -> None:
        index = GalleryIndex.load(self.out)
        store = _stamps_store(self.out, index.manifest.generation)
        store.verify()  # every part the file store.json pins
        if len(store) != index.ntotal:
            raise IndexIntegrityError(
                f"the index in {self.out} holds {index.ntotal} vectors, its part store {store.path} {len(store)}; "
                "rebuild the index from the part store"
            )

    def audit(self) -> dict[str, int]:
        """Rows of the index; duplicates: none once it opens (:meth:`GalleryIndex.load` refuses an index holding an
        id twice); unstamped: index rows without a stamp ≥ 0 in the part store beside it."""
        index = GalleryIndex.load(self.out)
        stamps = _stamps_store(self.out, index.manifest.generation).column("stamps")
        return {
            "rows": index.ntotal,
            "duplicates": 0,
            "unstamped": int((stamps < 0).sum()) + max(0, index.ntotal - len(stamps)),
        }

    def drop(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)
