"""Image sources: corpora streamed from disk (or memory) through torch DataLoaders.

Every source is an :class:`ImageSource` (ids, labels, fingerprint, ``loader(...)`` yielding
``(images uint8 (B, C, H, W), labels (B,), ids (B,))``): :class:`ArraySource` (an in-memory ArrayDataset),
:class:`ManifestSource` (a Parquet/CSV list of files), :class:`ImageFolderSource` (a folder tree) and
:class:`WebDatasetSource` (tar shards with an ``index.parquet``), the file-backed ones opened by kind with
:func:`create_source` (their catalog: ``register_source``, ``list_sources()``); :func:`write_webdataset` /
:func:`write_manifest` write them.
"""

from components.data.sources.base import ImageSource, UnknownIdError
from components.data.sources.catalog import check_source_options, create_source, list_sources, register_source
from components.data.sources.folder import ImageFolderSource
from components.data.sources.manifest import ManifestSource
from components.data.sources.memory import ArraySource
from components.data.sources.webdataset_source import WebDatasetSource
from components.data.sources.writer import write_manifest, write_webdataset

__all__ = [
    "ArraySource",
    "ImageFolderSource",
    "ImageSource",
    "ManifestSource",
    "UnknownIdError",
    "WebDatasetSource",
    "check_source_options",
    "create_source",
    "list_sources",
    "register_source",
    "write_manifest",
    "write_webdataset",
]
