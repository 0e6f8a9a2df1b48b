"""The image-source catalog: a file-backed source by kind (``@register_source("webdataset" | "manifest" | "folder")``).

``create_source(kind, path, **options)`` opens the source of ``kind`` at ``path``; the catalog's face is
:class:`components.plugins.Catalog`'s (``register_source``, ``create_source``, ``list_sources()``,
``check_source_options(kind, options)``). The registered in-memory datasets are not opened here: wrap their splits
with :class:`~components.data.sources.memory.ArraySource`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.data.sources.base import ImageSource
from components.errors import DataError
from components.plugins import Catalog

__all__ = ["SOURCES", "check_source_options", "create_source", "list_sources", "register_source"]

SOURCES: Catalog[type[ImageSource]] = Catalog(
    "image source kind",
    "components.data.sources",
    DataError,
    "params gallery.source or data.dataset names one",
    unknown="unknown image source kind {name!r}; use one of {names}",
    bad_options="{name} source does not take option(s) {unknown} (its options: {known_each})",
)

#: the catalog's face (components/plugins.py): ``@register_source("kind")`` on an ImageSource subclass whose
#: constructor takes ``(path, **options)``, ``list_sources()``, ``check_source_options(kind, options)``, and
#: :func:`create_source`, which checks the path first
register_source, list_sources, check_source_options = SOURCES.register, SOURCES.names, SOURCES.check_options


def create_source(kind: str, path: str | Path, /, **options: Any) -> ImageSource:
    """The source of ``kind`` at ``path``; ``options`` go to its constructor (name, channels, class_names, ...).

    DataError for an unknown kind or option, a missing path or unusable content (the message names the file and the
    fix).
    """
    source = SOURCES.get(kind)
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(f"{kind} source path {p} does not exist; point it at {source.path_form}")
    return SOURCES.create(kind, p, **options)
