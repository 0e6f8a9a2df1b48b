"""Any class-per-folder image tree (``data.path``), resized to ``data.image_size``.

Layouts:

- ``path/train/<class>/...`` plus ``path/test/<class>/...`` (or ``path/val/``):
  that split is used as is (``test/`` wins when both ``test/`` and ``val/`` exist);
- ``path/<class>/...``: every class is split stratified with ``test_fraction`` /
  ``split_seed``.

Classes are the sorted class-folder names (one list for both splits; a class
found only in the test split is an error). Images (png, jpg, jpeg, bmp, webp;
any case; searched recursively inside a class folder, hidden entries skipped)
are decoded with Pillow, converted to RGB and resized to image_size×image_size.
Ids number the images in (split, class, relative path) order.

Decoded arrays are cached in ``root/image_folder/<hash>.npz``, keyed by the
file list with sizes and modification times and by ``image_size``, so an
edited tree is decoded again. The fingerprint is the array fingerprint of
the decoded images and labels plus the relative file list and split settings.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from components.data.base import ArrayDataset, array_fingerprint
from components.data.catalog import DatasetRequest, register_dataset
from components.data.download import load_or_build_cache
from components.data.sources.split import DatasetSplits
from components.data.split import stratified_split
from components.errors import DataError

NAME = "image_folder"
EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
CACHE_VERSION = 1


def _class_dirs(folder: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(folder.iterdir()) if p.is_dir() and not p.name.startswith(".")}


def _images_in(folder: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found += [
            Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".") and f.lower().endswith(EXTENSIONS)
        ]
    return found


def _decode(path: Path, size: int) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.load()
            rgb = im.convert("RGB")
            if rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise DataError(
            f"cannot read image {path} ({type(e).__name__}: {e}); "
            "replace it with a valid image or remove it from the folder"
        ) from e


def _decode_all(paths: list[Path], size: int) -> np.ndarray:
    out = np.empty((len(paths), size, size, 3), dtype=np.uint8)

    def work(i: int) -> None:
        out[i] = _decode(paths[i], size)

    if paths:
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            for _ in pool.map(work, range(len(paths)), chunksize=64):
                pass
    return out


def _scan(folder: Path, classes: list[str]) -> tuple[list[Path], list[int]]:
    """Image paths and class indices of the class folders of ``folder`` (in ``classes``)."""
    paths: list[Path] = []
    labels: list[int] = []
    for i, c in enumerate(classes):
        d = folder / c
        if not d.is_dir():
            continue
        files = _images_in(d)
        paths += files
        labels += [i] * len(files)
    return paths, labels


@dataclass(frozen=True)
class _Files:
    """The image files of a tree: class names, train / test paths with class indices, and the split setting."""

    classes: list[str]
    train_paths: list[Path]
    train_labels: list[int]
    test_paths: list[Path]
    test_labels: list[int]
    split_info: str
    presplit: bool


def _checked_request(req: DatasetRequest) -> tuple[Path, int]:
    """The resolved image-tree folder and the image side length of ``req``; DataError when either is unusable."""
    path, image_size = req.path, req.image_size
    if not path:
        raise DataError(
            "dataset image_folder needs data.path: the folder holding one subfolder of images per class "
            "(optionally under train/ and test/ or val/); set data.path in params.yaml"
        )
    if image_size is None:
        raise DataError(
            "dataset image_folder needs data.image_size: its images may have different sizes and are all resized "
            "to image_size×image_size; set data.image_size in params.yaml (e.g. 64)"
        )
    if int(image_size) < 1:
        raise DataError(
            f"data.image_size must be a positive number of pixels, got {image_size}; set e.g. data.image_size=64"
        )
    size = int(image_size)
    top = Path(path).expanduser()
    if not top.is_dir():
        raise DataError(
            f"data.path {top} is not a folder; point data.path at the folder holding one subfolder of images per class"
        )
    return top.resolve(), size


def _presplit_files(top: Path, test_dir: Path) -> _Files:
    """The files of a ``train/`` + ``test/``|``val/`` tree; DataError for a test class without training folder."""
    train_classes = _class_dirs(top / "train")
    test_classes = _class_dirs(test_dir)
    if not train_classes:
        raise DataError(f"{top / 'train'} has no class folders; put the training images in {top / 'train'}/<class>/")
    only_test = sorted(set(test_classes) - set(train_classes))
    if only_test:
        raise DataError(
            f"class folders {only_test} exist in {test_dir} but not in {top / 'train'}: every test class needs "
            f"training images; add {top / 'train'}/<class>/ folders or remove those test folders"
        )
    classes = sorted(train_classes)
    tr_paths, tr_labels = _scan(top / "train", classes)
    te_paths, te_labels = _scan(test_dir, classes)
    return _Files(classes, tr_paths, tr_labels, te_paths, te_labels, f"folders train/{test_dir.name}", True)


def _list_files(top: Path, test_fraction: float, split_seed: int) -> _Files:
    """The files of the tree at ``top``, pre-split or to be split stratified; DataError for an empty class."""
    test_dir = next((top / n for n in ("test", "val") if (top / n).is_dir()), None)
    if (top / "train").is_dir() and test_dir is not None:
        files = _presplit_files(top, test_dir)
    else:
        class_dirs = _class_dirs(top)
        if not class_dirs:
            raise DataError(
                f"{top} has no class folders; arrange the images as {top}/<class>/<image> "
                f"(or {top}/train/<class>/ and {top}/test/<class>/)"
            )
        classes = sorted(class_dirs)
        tr_paths, tr_labels = _scan(top, classes)
        files = _Files(classes, tr_paths, tr_labels, [], [], f"stratified|{test_fraction}|{split_seed}", False)
    empty = [c for i, c in enumerate(files.classes) if i not in set(files.train_labels)]
    if empty:
        where = top / "train" if files.presplit else top
        raise DataError(
            f"class folders {empty} in {where} hold no images ({', '.join(EXTENSIONS)}); "
            "add images or remove the folders"
        )
    return files


def _cached_images(root: Path, top: Path, size: int, paths: list[Path], listing: str) -> tuple[np.ndarray, Path]:
    """Decoded images (N, size, size, 3) uint8 of ``paths`` and their cache file, decoded again when files changed."""
    stats = [os.stat(p) for p in paths]
    key = hashlib.sha256(
        (f"v{CACHE_VERSION}|{size}|{listing}|" + ",".join(f"{s.st_size}:{s.st_mtime_ns}" for s in stats)).encode()
    ).hexdigest()
    cache = root / NAME / (hashlib.sha256(f"{top}|{size}".encode()).hexdigest()[:16] + ".npz")
    arrays = load_or_build_cache(cache, lambda: {"images": _decode_all(paths, size)}, key=key)
    return arrays["images"], cache


@register_dataset(NAME)
def load_image_folder(req: DatasetRequest) -> DatasetSplits:
    """Split from ``train/`` + ``test/``|``val/`` when present, else stratified; RGB image_size² images."""
    top, size = _checked_request(req)
    files = _list_files(top, req.test_fraction, req.split_seed)
    all_paths = files.train_paths + files.test_paths
    rel = [p.relative_to(top).as_posix() for p in all_paths]
    listing = json.dumps({"classes": files.classes, "files": rel}, separators=(",", ":"))
    images, cache = _cached_images(Path(req.root), top, size, all_paths, listing)

    labels = np.asarray(files.train_labels + files.test_labels, dtype=np.int64)
    ids = np.arange(len(labels), dtype=np.int64)
    full = ArrayDataset(images, labels, ids, tuple(files.classes))
    if files.presplit:
        tr_idx = np.arange(len(files.train_labels))
        te_idx = np.arange(len(files.train_labels), len(labels))
    else:
        tr_idx, te_idx = stratified_split(labels, req.test_fraction, req.split_seed)
    fp = array_fingerprint(images, labels, extra=f"image_folder|{size}|{files.split_info}|{listing}")
    meta = {
        "source": str(top),
        "split": files.split_info,
        "image_size": size,
        "classes": list(files.classes),
        "num_files": len(rel),
        "cache": str(cache),
    }
    return DatasetSplits.from_arrays(NAME, full.subset(tr_idx), full.subset(te_idx), fp, meta)
