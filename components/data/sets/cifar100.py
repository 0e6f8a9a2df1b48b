"""CIFAR-100: 60,000 32×32 colour images of 100 classes (fine labels), official 50k/10k split.

Source: the "python version" tarball (``cifar-100-python.tar.gz``), kept at
``root/cifar100/`` and MD5-checked on every load (downloaded when missing and
``download`` is on). The pickles ``cifar-100-python/{train,test,meta}`` are read
straight from the verified tarball — nothing is extracted.

The pickles are Python 2 pickles of dicts holding numpy arrays. They are never
unpickled with plain ``pickle.load`` (which runs arbitrary code from the file):
:class:`RestrictedUnpickler` resolves only numpy's array reconstruction globals
and refuses everything else with a :class:`DataError`.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np

from components.data.base import ArrayDataset
from components.data.catalog import DatasetRequest, register_dataset
from components.data.download import fetch_archive
from components.data.sources.split import DatasetSplits
from components.errors import DataError

NAME = "cifar100"
URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
MD5 = "eb9058c3a382ffc7106e4002c42a8d85"
ARCHIVE = "cifar-100-python.tar.gz"
MEMBERS = {"train": "cifar-100-python/train", "test": "cifar-100-python/test", "meta": "cifar-100-python/meta"}
NUM_CLASSES = 100
SIDE = 32


def _allowed_globals() -> dict[tuple[str, str], object]:
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only; any other global is refused (never imported)."""

    _ALLOWED = _allowed_globals()

    def __init__(self, file, *, source: str = "pickle", **kw) -> None:
        super().__init__(file, **kw)
        self.source = source

    def find_class(self, module: str, name: str):
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise DataError(
                f"refusing to unpickle {self.source}: it references {module}.{name}, which a CIFAR data file never "
                f"contains (only numpy arrays are allowed; loading it could run arbitrary code). The file is not "
                f"the official dataset: delete it and download it again from {URL}"
            ) from None


def safe_unpickle(data: bytes, source: str) -> object:
    """Unpickle CIFAR's Python 2 pickle bytes (``encoding="bytes"``: keys stay bytes) with the restricted unpickler."""
    try:
        return RestrictedUnpickler(io.BytesIO(data), source=source, encoding="bytes").load()
    except DataError:
        raise
    except Exception as e:
        raise DataError(
            f"{source} is not a readable CIFAR pickle ({type(e).__name__}: {e}); "
            "delete the archive and download it again"
        ) from e


def _read_members(archive: Path) -> dict[str, bytes]:
    wanted = {v: k for k, v in MEMBERS.items()}
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for m in tar:
                key = wanted.get(m.name.lstrip("./"))
                if key is None:
                    continue
                if not m.isfile():
                    raise DataError(
                        f"{archive}: {m.name} is not a regular file; delete the archive and download it again"
                    )
                f = tar.extractfile(m)
                assert f is not None
                out[key] = f.read()
    except DataError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise DataError(
            f"archive {archive} is corrupted or truncated ({type(e).__name__}: {e}); delete it and download it again"
        ) from e
    missing = sorted(set(MEMBERS) - set(out))
    if missing:
        raise DataError(
            f"{archive} lacks {', '.join(MEMBERS[m] for m in missing)}; it is not the CIFAR-100 python archive: "
            f"delete it and download it again from {URL}"
        )
    return out


def _split(d: object, source: str, id_offset: int, class_names: tuple[str, ...]) -> ArrayDataset:
    if not isinstance(d, dict) or b"data" not in d or b"fine_labels" not in d:
        raise DataError(
            f"{source} is not a CIFAR-100 batch (no b'data' / b'fine_labels'); delete the archive and download it again"
        )
    data = d[b"data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * SIDE * SIDE:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(
            f"{source}: b'data' must be uint8 (N, 3072), got {got}; delete the archive and download it again"
        )
    labels = np.asarray(d[b"fine_labels"], dtype=np.int64)
    if labels.shape != (len(data),):
        raise DataError(
            f"{source}: {len(data)} images but {labels.size} fine labels; delete the archive and download it again"
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= len(class_names)):
        raise DataError(
            f"{source}: fine labels outside 0..{len(class_names) - 1}; delete the archive and download it again"
        )
    # rows are 1024 R, 1024 G, 1024 B values (CHW) -> (N, 32, 32, 3)
    images = np.ascontiguousarray(data.reshape(-1, 3, SIDE, SIDE).transpose(0, 2, 3, 1))
    ids = np.arange(id_offset, id_offset + len(labels), dtype=np.int64)
    return ArrayDataset(images, labels, ids, class_names)


@register_dataset(NAME)
def load_cifar100(req: DatasetRequest) -> DatasetSplits:
    """Official split (``test_fraction``/``split_seed`` ignored); 32×32×3 (``image_size`` is the caller's job)."""
    root, download = req.root, req.download
    archive = Path(root) / NAME / ARCHIVE
    source = fetch_archive(archive, URL, MD5, allowed=download, what="CIFAR-100")
    members = _read_members(archive)
    meta = safe_unpickle(members["meta"], f"{archive}:{MEMBERS['meta']}")
    names = meta.get(b"fine_label_names") if isinstance(meta, dict) else None
    if not isinstance(names, list) or len(names) != NUM_CLASSES:
        raise DataError(
            f"{archive}:{MEMBERS['meta']} has no list of {NUM_CLASSES} b'fine_label_names'; "
            "delete the archive and download it again"
        )
    class_names = tuple(n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names)
    train = _split(
        safe_unpickle(members["train"], f"{archive}:{MEMBERS['train']}"),
        f"{archive}:{MEMBERS['train']}",
        0,
        class_names,
    )
    test = _split(
        safe_unpickle(members["test"], f"{archive}:{MEMBERS['test']}"),
        f"{archive}:{MEMBERS['test']}",
        len(train),
        class_names,
    )
    fp = hashlib.sha256(f"cifar100|{ARCHIVE}|md5:{MD5}|fine|official".encode()).hexdigest()
    return DatasetSplits.from_arrays(
        NAME,
        train,
        test,
        fp,
        {"source": source, "archive": str(archive), "md5": MD5, "labels": "fine", "split": "official"},
    )
