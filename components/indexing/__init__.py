"""Gallery indexing: exact or approximate FAISS search with a verified manifest (docs/design.md §7, §8)."""

from components.indexing.faiss_index import (
    INDEX_FILE,
    MANIFEST_FILE,
    GalleryIndex,
)
from components.indexing.index_config import IndexConfig
from components.indexing.manifest import FORMAT_VERSION, INDEX_TYPES, IndexManifest
from components.indexing.vectors import HYPERBOLOID_RTOL

__all__ = [
    "FORMAT_VERSION",
    "HYPERBOLOID_RTOL",
    "INDEX_FILE",
    "INDEX_TYPES",
    "MANIFEST_FILE",
    "GalleryIndex",
    "IndexConfig",
    "IndexManifest",
]
