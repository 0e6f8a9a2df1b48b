"""Tiny ImageNet: 110,000 64×64 colour images of 200 classes; train = ``train/``, test = ``val/``.

Source: ``tiny-imagenet-200.zip`` kept at ``root/tiny_imagenet/`` and MD5-checked
on every load (downloaded when missing and ``download`` is on). The first load
extracts it, decodes every JPEG with Pillow (greyscale ones converted to RGB)
and caches the arrays in ``root/tiny_imagenet/tiny_imagenet.npz`` (keyed by the
archive's MD5); the extracted folder is removed afterwards. Later loads read
the cache.

Class order is ``wnids.txt``'s order; a class's name is the first name of its
``words.txt`` entry. Test labels come from ``val/val_annotations.txt``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from components.data.base import ArrayDataset
from components.data.catalog import DatasetRequest, register_dataset
from components.data.download import extract, fetch_archive, load_or_build_cache
from components.data.sources.split import DatasetSplits
from components.errors import DataError

NAME = "tiny_imagenet"
URL = "https://cs231n.stanford.edu/tiny-imagenet-200.zip"
MD5 = "90528d7ca1a48142e341f4ef8d21d0de"
ARCHIVE = "tiny-imagenet-200.zip"
TOP = "tiny-imagenet-200"
SIDE = 64
CACHE_VERSION = 1


def _decode(path: Path) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            a = np.asarray(im, dtype=np.uint8)
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(
            f"cannot decode image {path} ({type(e).__name__}: {e}); delete {ARCHIVE} and download it again"
        ) from e
    if a.shape != (SIDE, SIDE, 3):
        raise DataError(
            f"{path} is {a.shape[1]}×{a.shape[0]}, Tiny ImageNet images are 64×64; "
            f"delete {ARCHIVE} and download it again"
        )
    return a


def _decode_all(paths: list[Path]) -> np.ndarray:
    out = np.empty((len(paths), SIDE, SIDE, 3), dtype=np.uint8)
    if not paths:
        return out

    def work(i: int) -> None:
        out[i] = _decode(paths[i])

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        for _ in pool.map(work, range(len(paths)), chunksize=256):
            pass
    return out


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(
            f"{path} is missing; {ARCHIVE} is incomplete or not Tiny ImageNet: delete it and download it again"
        )
    return [ln.rstrip("\r\n") for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _build(top: Path) -> dict[str, np.ndarray]:
    wnids = [ln.strip() for ln in _read_lines(top / "wnids.txt")]
    if len(set(wnids)) != len(wnids) or not wnids:
        raise DataError(f"{top / 'wnids.txt'} is empty or lists a class twice; delete {ARCHIVE} and download it again")
    words: dict[str, str] = {}
    if (top / "words.txt").is_file():
        for ln in _read_lines(top / "words.txt"):
            wnid, _, text = ln.partition("\t")
            words[wnid.strip()] = text.split(",")[0].strip()
    class_of = {w: i for i, w in enumerate(wnids)}

    train_paths: list[Path] = []
    train_labels: list[int] = []
    for i, w in enumerate(wnids):
        d = top / "train" / w / "images"
        files = sorted(p for p in d.glob("*") if p.suffix.lower() in (".jpeg", ".jpg")) if d.is_dir() else []
        if not files:
            raise DataError(f"no training images in {d}; {ARCHIVE} is incomplete: delete it and download it again")
        train_paths += files
        train_labels += [i] * len(files)

    test_paths: list[Path] = []
    test_labels: list[int] = []
    ann = top / "val" / "val_annotations.txt"
    for n, ln in enumerate(_read_lines(ann), 1):
        fields = ln.split("\t")
        if len(fields) < 2 or fields[1].strip() not in class_of:
            raise DataError(
                f"{ann} line {n} ({ln!r}) does not name a file and a class of wnids.txt; "
                f"delete {ARCHIVE} and download it again"
            )
        p = top / "val" / "images" / fields[0].strip()
        if not p.is_file():
            raise DataError(f"{p} (listed in {ann}) is missing; delete {ARCHIVE} and download it again")
        test_paths.append(p)
        test_labels.append(class_of[fields[1].strip()])

    return {
        "train_images": _decode_all(train_paths),
        "train_labels": np.asarray(train_labels, dtype=np.int64),
        "test_images": _decode_all(test_paths),
        "test_labels": np.asarray(test_labels, dtype=np.int64),
        "class_wnids": np.asarray(wnids),
        "class_names": np.asarray([words.get(w, w) for w in wnids]),
    }


@register_dataset(NAME)
def load_tiny_imagenet(req: DatasetRequest) -> DatasetSplits:
    """Official train/val split (``test_fraction``/``split_seed`` ignored).

    Images are 64×64×3 (``image_size`` is the caller's job).
    """
    root, download = req.root, req.download
    base = Path(root) / NAME
    archive = base / ARCHIVE
    source = fetch_archive(archive, URL, MD5, allowed=download, what="Tiny ImageNet")

    def build() -> dict[str, np.ndarray]:
        extracted = base / "extracted"
        if extracted.exists():  # left over from an interrupted build: may come from another archive
            shutil.rmtree(extracted)
        try:
            top = extract(archive, extracted) / TOP
            if not top.is_dir():
                raise DataError(
                    f"{archive} has no {TOP}/ folder; it is not Tiny ImageNet: delete it and download it again"
                )
            return _build(top)
        finally:
            shutil.rmtree(extracted, ignore_errors=True)

    a = load_or_build_cache(base / f"{NAME}.npz", build, key=f"v{CACHE_VERSION}|md5:{MD5}")
    names = tuple(str(n) for n in a["class_names"])
    n_train = len(a["train_labels"])
    train = ArrayDataset(a["train_images"], a["train_labels"], np.arange(n_train, dtype=np.int64), names)
    test = ArrayDataset(
        a["test_images"], a["test_labels"], np.arange(n_train, n_train + len(a["test_labels"]), dtype=np.int64), names
    )
    fp = hashlib.sha256(f"tiny_imagenet|{ARCHIVE}|md5:{MD5}|train/val|rgb{SIDE}".encode()).hexdigest()
    meta = {
        "source": source,
        "archive": str(archive),
        "md5": MD5,
        "split": "official (train/ vs val/)",
        "wnids": [str(w) for w in a["class_wnids"]],
    }
    return DatasetSplits.from_arrays(NAME, train, test, fp, meta)
