"""``gallery.store: faiss`` — the gallery's vectors in FAISS files inside the version folder (the embedded default).

:meth:`FaissFiles.build` streams the part store into a :class:`~components.indexing.faiss_index.GalleryIndex`
(one pass for flat, two for the approximate types), saves it in the index folder (``index.faiss`` + its
``manifest.json``, the attachment the lineage pins) and loads it back, verified. The generation stamps stay in the
part store beside the index (``gallery/`` next to ``index/``), where :meth:`FaissFiles.count_by_generation` reads
them. The live alias is ``live/CURRENT`` itself: FAISS files keep none of their own.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from components.errors import IndexIntegrityError
from components.indexing.backend import VectorStore, register_store
from components.indexing.faiss_index import MANIFEST_FILE, GalleryIndex
from components.indexing.index_config import IndexConfig
from components.indexing.manifest import IndexManifest
from components.indexing.parts import GalleryParts

__all__ = ["FaissFiles"]


def _stamps_store(out: Path, generation: int) -> GalleryParts:
    """The part store beside the index folder ``out`` (``gallery/``; ``gallery.npz`` in a version written before
    part stores)."""
    folder, legacy = out.parent / "gallery", out.parent / "gallery.npz"
    return GalleryParts(legacy if legacy.is_file() and not folder.is_dir() else folder, generation=generation)


@register_store("faiss")
class FaissFiles(VectorStore):
    """FAISS index files in the gallery version's folder (``uri`` unused)."""

    name = "faiss"

    def build(
        self,
        parts: GalleryParts,
        out: Path,
        *,
        collection: str,
        generation: int,
        config: IndexConfig,
        compatible: list[int] | None = None,
    ) -> GalleryIndex:
        GalleryIndex.build_streaming(
            parts.index_chunks(),
            space=next(parts.parts()).gallery.retrieval_space,
            generation=generation,
            config=config,
            compatible_generations=compatible,
        ).save(out)
        return self.open(out)

    def open(self, out: Path) -> GalleryIndex:
        return GalleryIndex.load(out)

    def count_by_generation(self, out: Path) -> dict[int, int]:
        # the manifest names the generation; the stamps are the part store's (the index file itself is not read)
        try:
            manifest = IndexManifest.from_json((Path(out) / MANIFEST_FILE).read_bytes())
        except OSError as err:
            raise IndexIntegrityError(
                f"{Path(out) / MANIFEST_FILE} cannot be read ({err}); rebuild the index"
            ) from None
        stamps = _stamps_store(Path(out), manifest.generation).column("stamps")
        gens, counts = np.unique(stamps, return_counts=True)
        return {int(g): int(c) for g, c in zip(gens, counts)}

    def verify(self, out: Path, *, by_generation: bool = True) -> None:
        index = GalleryIndex.load(out)
        store = _stamps_store(Path(out), index.manifest.generation)
        store.verify()  # every part the file store.json pins
        if len(store) != index.ntotal:
            raise IndexIntegrityError(
                f"the index in {out} holds {index.ntotal} vectors, its part store {store.path} {len(store)}; "
                "rebuild the index from the part store"
            )

    def audit(self, out: Path) -> dict[str, int]:
        """Rows of the index; duplicates: none once it opens (:meth:`GalleryIndex.load` refuses an index holding an
        id twice); unstamped: index rows without a stamp ≥ 0 in the part store beside it."""
        index = GalleryIndex.load(out)
        stamps = _stamps_store(Path(out), index.manifest.generation).column("stamps")
        return {
            "rows": index.ntotal,
            "duplicates": 0,
            "unstamped": int((stamps < 0).sum()) + max(0, index.ntotal - len(stamps)),
        }

    def drop(self, out: Path) -> None:
        shutil.rmtree(out, ignore_errors=True)
