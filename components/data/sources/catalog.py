"""Open a file-backed image source by kind: ``open_source("webdataset" | "manifest" | "folder", path, **options)``.

The registered in-memory datasets are not opened here: wrap their splits with
:class:`~components.data.sources.memory.ArraySource`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.data.sources.base import ImageSource
from components.data.sources.folder import ImageFolderSource
from components.data.sources.manifest import ManifestSource
from components.data.sources.webdataset_source import WebDatasetSource
from components.errors import DataError

__all__ = ["SOURCE_KINDS", "open_source"]

#: kind → constructor (path, **options).
SOURCE_KINDS: dict[str, Callable[..., ImageSource]] = {
    "webdataset": WebDatasetSource,
    "manifest": ManifestSource,
    "folder": ImageFolderSource,
}

_WHAT = {
    "webdataset": "a folder of WebDataset .tar shards",
    "manifest": "a .parquet or .csv manifest file",
    "folder": "a folder of class subfolders or of images",
}


def open_source(kind: str, path: str | Path, **options: Any) -> ImageSource:
    """The source of ``kind`` at ``path``; ``options`` go to its constructor (name, channels, class_names, ...).

    DataError for an unknown kind, a missing path or unusable content (the message names the file and the fix).
    """
    if kind not in SOURCE_KINDS:
        raise DataError(f"unknown image source kind {kind!r}; use one of {sorted(SOURCE_KINDS)}")
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"{kind} source path {p} does not exist; point it at {_WHAT[kind]}")
    try:
        return SOURCE_KINDS[kind](p, **options)
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise
        raise DataError(f"{kind} source does not take option(s) {sorted(options)} ({e})") from e
