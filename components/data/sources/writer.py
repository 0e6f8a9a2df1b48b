"""Writers: image batches → WebDataset tar shards with their index; file lists → a manifest table.

Shards are ``shard-%06d.tar`` of ``shard_size`` samples, each written by a ``wds.TarWriter`` (members
``<id>.<format>``, ``<id>.id`` and, for labelled items, ``<id>.cls``; member mtimes fixed at 0, so equal input gives
byte-identical tars); the index records where each sample starts in its tar. Formats:
``png`` (lossless, Pillow compression level 1), ``jpg`` (quality 95, lossy) and ``npy`` (the raw uint8
(H, W, C) array with a .npy header: no encoding cost, larger shards). ``index.parquet`` is written last,
atomically.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import webdataset as wds

from components.data.sources.base import check_unique_ids
from components.data.sources.shard_index import INDEX_NAME, ShardIndex, atomic_write_table, shard_stats, write_index
from components.data.sources.webdataset_source import WebDatasetSource
from components.errors import DataError

__all__ = ["IMAGE_FORMATS", "encode_image", "write_manifest", "write_webdataset"]

SHARD_PATTERN = "shard-%06d.tar"


def _png(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img[:, :, 0] if img.shape[2] == 1 else img).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _jpg(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img[:, :, 0] if img.shape[2] == 1 else img).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


_NPY_HEADERS: dict[tuple[int, ...], bytes] = {}


def _npy(img: np.ndarray) -> bytes:
    header = _NPY_HEADERS.get(img.shape)
    if header is None:
        buf = io.BytesIO()
        np.save(buf, np.zeros(img.shape, dtype=np.uint8))
        header = _NPY_HEADERS[img.shape] = buf.getvalue()[: -img.size]
    return header + np.ascontiguousarray(img).tobytes()


IMAGE_FORMATS: dict[str, Callable[[np.ndarray], bytes]] = {"png": _png, "jpg": _jpg, "npy": _npy}


def encode_image(img: np.ndarray, image_format: str = "png") -> bytes:
    """One image uint8 (H, W, C) (C = 1 or 3) encoded as ``image_format`` (png, jpg or npy)."""
    if image_format not in IMAGE_FORMATS:
        raise DataError(f"image_format {image_format!r} is not one of {sorted(IMAGE_FORMATS)}")
    return IMAGE_FORMATS[image_format](img)


def _checked(images: np.ndarray, labels: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    images, labels, ids = np.asarray(images), np.asarray(labels), np.asarray(ids)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] not in (1, 3):
        raise DataError(f"images must be uint8 (B, H, W, C) with C = 1 or 3, got {images.dtype} {images.shape}")
    if labels.shape != (len(images),) or ids.shape != (len(images),):
        raise DataError(f"labels and ids must have shape ({len(images)},), got {labels.shape} / {ids.shape}")
    if not (np.issubdtype(labels.dtype, np.integer) and np.issubdtype(ids.dtype, np.integer)):
        raise DataError(f"labels and ids must be integers, got {labels.dtype} / {ids.dtype}")
    return images, labels.astype(np.int64), ids.astype(np.int64)


def write_webdataset(
    out_dir: str | Path,
    batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]],
    shard_size: int = 10000,
    image_format: str = "png",
    *,
    class_names: Sequence[str] | None = None,
) -> WebDatasetSource:
    """Write ``(images uint8 (B, H, W, C), labels (B,), ids (B,))`` batches as shards of ``shard_size`` samples.

    Replaces earlier ``shard-*.tar`` files and the index in ``out_dir``. Labels < 0 are written without a
    ``cls`` member (unlabelled). Ids must be unique (DataError otherwise, and no index is written). Returns the
    :class:`WebDatasetSource` of the result.
    """
    if shard_size < 1:
        raise DataError(f"shard_size must be at least 1, got {shard_size}")
    encode = IMAGE_FORMATS.get(image_format)
    if encode is None:
        raise DataError(f"image_format {image_format!r} is not one of {sorted(IMAGE_FORMATS)}")
    out = Path(out_dir).expanduser().absolute()
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("shard-*.tar"), out / INDEX_NAME]:
        old.unlink(missing_ok=True)
    all_ids, all_labels, shard, position, offset = [], [], [], [], []
    first_shape: tuple[int, ...] | None = None
    n_shards, count = 1, 0
    sink = wds.TarWriter(str(out / (SHARD_PATTERN % 0)), encoder=False, mtime=0)
    try:
        for batch in batches:
            images, labels, ids = _checked(*batch)
            if first_shape is None and len(images):
                first_shape = images.shape[1:]
            b_shard, b_pos, b_off = (np.empty(len(ids), dtype=np.int64) for _ in range(3))
            for i, (img, label, sid) in enumerate(zip(images, labels.tolist(), ids.tolist())):
                if count == shard_size:
                    sink.close()
                    sink = wds.TarWriter(str(out / (SHARD_PATTERN % n_shards)), encoder=False, mtime=0)
                    n_shards, count = n_shards + 1, 0
                sample = {"__key__": str(sid), image_format: encode(img), "id": str(sid).encode()}
                if label >= 0:
                    sample["cls"] = str(label).encode()
                b_shard[i], b_pos[i], b_off[i] = n_shards - 1, count, sink.tarstream.offset  # where it starts
                sink.write(sample)
                count += 1
            all_ids.append(ids)
            all_labels.append(labels)
            shard.append(b_shard)
            position.append(b_pos)
            offset.append(b_off)
    finally:
        sink.close()
    shards = sorted(out.glob("shard-*.tar"))

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    index = ShardIndex(
        tuple(p.name for p in shards), cat(shard), cat(position), cat(all_ids), cat(all_labels), cat(offset), {}
    )
    check_unique_ids(index.ids, f"the batches written to {out}", "give every item its own id and write again")
    index.meta["stats"] = shard_stats(shards)
    if first_shape is not None:
        index.meta.update(channels=int(first_shape[2]), height=int(first_shape[0]), width=int(first_shape[1]))
    if class_names is not None:
        index.meta["class_names"] = list(class_names)
    write_index(out, index)
    return WebDatasetSource(out, class_names=class_names)


def write_manifest(
    out_path: str | Path,
    paths: Sequence[str | Path],
    ids: Sequence[int] | np.ndarray | None = None,
    labels: Sequence[int | str | None] | np.ndarray | None = None,
) -> Path:
    """Write a manifest (``.parquet`` / ``.pq``: Parquet, ``.csv``: CSV; atomically) of ``paths`` with optional
    ``ids`` (integers) and ``labels`` (integers, or class names; None → unlabelled). Returns the path."""
    out = Path(out_path).expanduser().absolute()
    if out.suffix.lower() not in (".parquet", ".pq", ".csv"):
        raise DataError(f"manifest {out} must end in .parquet, .pq or .csv")
    columns: dict[str, pa.Array] = {"path": pa.array([str(p) for p in paths], pa.string())}
    for key, values in (("id", ids), ("label", labels)):
        if values is None:
            continue
        if len(values) != len(paths):
            raise DataError(f"{len(values)} {key}s for {len(paths)} paths; give one per path")
        arr = np.asarray(values)
        columns[key] = pa.array(arr, pa.int64()) if np.issubdtype(arr.dtype, np.integer) else pa.array(list(values))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_table(pa.table(columns), out)
    return out
