"""Images in a folder: one subfolder per class (labelled), or images directly in the folder (unlabelled).

- Labelled: ``path/<class>/...`` — classes are the sorted subfolder names, label = index in that list; images
  are searched recursively inside a class folder. Loose images next to class folders are an error.
- Unlabelled: ``path/<image>`` — every label is -1, ``class_names`` is empty.

Images: png, jpg, jpeg, bmp, webp (any case); hidden entries (``.name``) are skipped.
Positions: (class, relative path) order. Ids: a hash of the relative path (``/``-separated) — the first 8 bytes
of its sha256 as a non-negative int63 — so an item keeps its id when other files are added or removed (and
the same tree elsewhere has the same ids). Batches come in ``positions`` order for any number of workers.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from components.data.sources.catalog import register_source
from components.data.sources.decode import IMAGE_EXTENSIONS
from components.data.sources.files import FileSource, PathTable
from components.errors import DataError

__all__ = ["ImageFolderSource", "path_id"]


def path_id(relative_path: str) -> int:
    """The item id of a file at ``relative_path`` (``/``-separated): sha256's first 8 bytes, top bit cleared."""
    return int.from_bytes(hashlib.sha256(relative_path.encode("utf-8")).digest()[:8], "big") & (2**63 - 1)


def _is_image(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)


def _images_under(top: Path, folder: Path) -> list[str]:
    """Relative (to ``top``) ``/``-paths of the images anywhere under ``folder``, sorted, hidden entries skipped."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = Path(dirpath).relative_to(top).as_posix()
        found += [f"{rel}/{f}" for f in sorted(filenames) if _is_image(f)]
    return found


def scan_folder(top: Path) -> tuple[list[str], np.ndarray, tuple[str, ...]]:
    """(relative paths, labels (N,) int64, class names) of the image tree at ``top``; DataError when unusable."""
    if not top.is_dir():
        raise DataError(
            f"image folder {top} does not exist or is not a folder; point the folder source at a folder of "
            "class subfolders (or of images)"
        )
    entries = sorted(os.scandir(top), key=lambda e: e.name)
    classes = [e.name for e in entries if e.is_dir() and not e.name.startswith(".")]
    loose = [e.name for e in entries if e.is_file() and _is_image(e.name)]
    if classes and loose:
        raise DataError(
            f"image folder {top} holds class folders {classes[:5]} and loose images {loose[:3]}: move the loose "
            "images into a class folder (labelled) or the class folders away (unlabelled)"
        )
    if not classes:
        if not loose:
            raise DataError(f"image folder {top} holds no images ({', '.join(IMAGE_EXTENSIONS)}); add images")
        return loose, np.full(len(loose), -1, dtype=np.int64), ()
    paths: list[str] = []
    labels: list[int] = []
    for i, c in enumerate(classes):
        files = _images_under(top, top / c)
        paths += files
        labels += [i] * len(files)
    empty = [c for i, c in enumerate(classes) if i not in set(labels)]
    if empty:
        raise DataError(f"class folders {empty[:5]} of {top} hold no images; add images or remove the folders")
    return paths, np.asarray(labels, dtype=np.int64), tuple(classes)


@register_source("folder")
class ImageFolderSource(FileSource):
    """The images of the folder at ``path`` (see the module docstring for the layouts, positions and ids).

    ``channels`` (1 or 3): None decides from the first image.
    """

    path_form = "a folder of class subfolders or of images"

    def __init__(self, path: str | Path, *, name: str | None = None, channels: int | None = None) -> None:
        self.path = Path(path).expanduser().absolute()
        rel, labels, classes = scan_folder(self.path)
        ids = np.fromiter((path_id(p) for p in rel), dtype=np.int64, count=len(rel))
        super().__init__(
            name or self.path.name,
            PathTable(rel, self.path),
            ids,
            labels,
            classes,
            channels=channels,
            hint=f"replace the file with a valid image or remove it from {self.path}",
            where=f"image folder {self.path} (ids hash the relative paths)",
        )
