"""``gallery.store: faiss`` — FAISS index files in each gallery version's folder (docs/design.md §7, §8): the index
(:mod:`.gallery_index`), its structures (:mod:`.index_types`), its type and parameters (:mod:`.index_config`), its
manifest (:mod:`.manifest`), the search effort chosen from measured recall (:mod:`.tuning`), its checked inputs
(:mod:`.build_inputs`) and the store registered under ``faiss`` (:mod:`.files`)."""

from components.indexing.stores.faiss.files import FaissCollection, FaissFiles
from components.indexing.stores.faiss.gallery_index import INDEX_FILE, MANIFEST_FILE, GalleryIndex
from components.indexing.stores.faiss.index_config import IndexConfig
from components.indexing.stores.faiss.manifest import FORMAT_VERSION, INDEX_TYPES, IndexManifest

__all__ = [
    "FORMAT_VERSION",
    "INDEX_FILE",
    "INDEX_TYPES",
    "MANIFEST_FILE",
    "FaissCollection",
    "FaissFiles",
    "GalleryIndex",
    "IndexConfig",
    "IndexManifest",
]
