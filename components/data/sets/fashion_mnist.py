"""Fashion-MNIST: 70,000 28×28 grey images of 10 clothing classes, official 60k/10k split.

Each of the four IDX ``.gz`` files is taken from the first place that has it:

1. ``root/fashion_mnist/<file>`` (the dataset cache; downloads go here),
2. ``/usr/share/datasets/fashion-mnist/<file>`` (Debian's ``dataset-fashion-mnist``),
3. a download from the official mirror (then the GitHub mirror) when ``download`` is on.

A file is accepted when its ``.gz`` MD5 is the official one OR the SHA-256 of its
decompressed content is the known one (Debian re-compressed the files, so its
``.gz`` bytes differ while the content is the same). Anything else raises
:class:`ChecksumError`. The fingerprint is built from the decompressed contents'
SHA-256s, so it is the same whichever copy was read.
"""

from __future__ import annotations

import gzip
import hashlib
import struct
import zlib
from pathlib import Path

import numpy as np

from components.data.base import ArrayDataset
from components.data.catalog import DatasetRequest, register_dataset
from components.data.download import ChecksumError, download_first
from components.data.sources.split import DatasetSplits
from components.errors import DataError

NAME = "fashion_mnist"

CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")

#: The S3 "website" endpoint serves plain HTTP only (the content is MD5-checked).
MIRRORS = (
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
)

#: Folders searched (after ``root/fashion_mnist``) for already-installed copies.
SYSTEM_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)

#: file -> {"md5": official .gz MD5, "sha256": SHA-256 of the decompressed IDX content}
CHECKSUMS: dict[str, dict[str, str]] = {
    "train-images-idx3-ubyte.gz": {
        "md5": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "sha256": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    },
    "train-labels-idx1-ubyte.gz": {
        "md5": "25c81989df183df01b3e8a0aad5dffbe",
        "sha256": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    },
    "t10k-images-idx3-ubyte.gz": {
        "md5": "bef4ecab320f06d8554ea6380940ec79",
        "sha256": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    },
    "t10k-labels-idx1-ubyte.gz": {
        "md5": "bb300cfdad3c16e7a12a480ee83cd310",
        "sha256": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    },
}

FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}

IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049
HEIGHT = WIDTH = 28


def _locate(root: Path, fname: str, download: bool) -> tuple[Path, str]:
    """(path of the .gz file, where it came from: a local path or the URL it was downloaded from)."""
    own = root / NAME / fname
    if own.exists():
        return own, str(own)
    for d in SYSTEM_DIRS:
        if (d / fname).is_file():
            return d / fname, str(d / fname)
    if not download:
        raise DataError(
            f"Fashion-MNIST file {fname} not found in {root / NAME} nor in "
            f"{', '.join(str(d) for d in SYSTEM_DIRS)}, and downloading is off; set data.download=true, "
            f"install Debian's dataset-fashion-mnist, or place the file at {own} (gz md5 {CHECKSUMS[fname]['md5']})"
        )
    _, url = download_first([m + fname for m in MIRRORS], own, md5=CHECKSUMS[fname]["md5"])
    return own, url or str(own)


def _read_verified(path: Path, fname: str) -> tuple[bytes, str]:
    """Decompressed content of ``path`` and its SHA-256, after the checksum check."""
    blob = path.read_bytes()
    expected = CHECKSUMS[fname]
    md5_ok = hashlib.md5(blob).hexdigest() == expected["md5"]
    try:
        raw = gzip.decompress(blob)
    except (EOFError, OSError, zlib.error) as e:
        raise DataError(
            f"Fashion-MNIST file {path} is corrupted or truncated ({type(e).__name__}: {e}); "
            f"delete it (or reinstall dataset-fashion-mnist) and run again to download it afresh"
        ) from e
    digest = hashlib.sha256(raw).hexdigest()
    if not md5_ok and digest != expected["sha256"]:
        raise ChecksumError(
            f"Fashion-MNIST file {path} matches neither the official gz md5 {expected['md5']} nor the content "
            f"sha256 {expected['sha256']} (its content sha256 is {digest}); it is a different or damaged file: "
            f"delete it and run again to download it afresh"
        )
    return raw, digest


def parse_idx(raw: bytes, magic: int, source: str) -> np.ndarray:
    """An IDX array of unsigned bytes (``magic`` 2051: N×H×W images, 2049: N labels), vectorised."""
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(
            f"{source} is truncated (only {len(raw)} bytes, no IDX header); delete it and download it again"
        )
    (got_magic,) = struct.unpack(">I", raw[:4])
    if got_magic != magic:
        raise DataError(
            f"{source} is not an IDX file of the expected kind (magic number {got_magic}, expected {magic}); "
            f"the files may be swapped or damaged: delete it and download it again"
        )
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected_len = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) != expected_len:
        raise DataError(
            f"{source} holds {len(raw) - header} data bytes but its header {dims} announces "
            f"{expected_len - header}; it is truncated or corrupted: delete it and download it again"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _images(raw: bytes, source: str) -> np.ndarray:
    a = parse_idx(raw, IMAGES_MAGIC, source)
    if a.shape[1:] != (HEIGHT, WIDTH):
        raise DataError(
            f"{source} holds {a.shape[1]}×{a.shape[2]} images, Fashion-MNIST's are 28×28; "
            "delete it and download it again"
        )
    return a.reshape(len(a), HEIGHT, WIDTH, 1).copy()


def _labels(raw: bytes, source: str) -> np.ndarray:
    a = parse_idx(raw, LABELS_MAGIC, source).astype(np.int64)
    if len(a) and int(a.max()) >= len(CLASS_NAMES):
        raise DataError(
            f"{source} has label {int(a.max())}, Fashion-MNIST has 10 classes (0-9); delete it and download it again"
        )
    return a


@register_dataset(NAME)
def load_fashion_mnist(req: DatasetRequest) -> DatasetSplits:
    """Official split (``test_fraction``/``split_seed`` ignored); 28×28×1 (``image_size`` is the caller's job)."""
    root, download = req.root, req.download
    root = Path(root)
    arrays: dict[str, np.ndarray] = {}
    digests: dict[str, str] = {}
    sources: dict[str, str] = {}
    for key, fname in FILES.items():
        p, src = _locate(root, fname, download)
        raw, digests[fname] = _read_verified(p, fname)
        sources[fname] = src
        arrays[key] = _images(raw, str(p)) if key.endswith("images") else _labels(raw, str(p))
        del raw
    parts = []
    offset = 0
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if len(images) != len(labels):
            raise DataError(
                f"Fashion-MNIST {split} has {len(images)} images but {len(labels)} labels; the files do not belong "
                f"together: delete them from {root / NAME} and run again"
            )
        ids = np.arange(offset, offset + len(labels), dtype=np.int64)
        offset += len(labels)
        parts.append(ArrayDataset(images, labels, ids, CLASS_NAMES))
    fp = hashlib.sha256(
        ("fashion_mnist|official|" + "|".join(f"{f}:{digests[f]}" for f in FILES.values())).encode()
    ).hexdigest()
    meta = {"source": sources, "content_sha256": digests, "split": "official"}
    return DatasetSplits.from_arrays(NAME, parts[0], parts[1], fp, meta)
