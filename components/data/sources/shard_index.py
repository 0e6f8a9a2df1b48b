"""The index of a folder of WebDataset tar shards: ``index.parquet`` beside the shards.

One row per sample, in shard order then order within the shard: ``shard`` (the tar's file name), ``id``,
``label`` (-1 without a ``cls`` member), ``position`` (the sample's number within its shard) and ``offset`` (the
byte offset in the tar of the sample's first member header, so a reader seeks straight to it). The schema
metadata (key ``bctflow``) records every shard's size and mtime, so an index that no longer matches its shards
is noticed and rebuilt, and the first image's channels / height / width (and class names when the writer knew
them). A missing or stale index (an older one without ``offset`` too) is rebuilt by one scan of the tars that
reads only the small ``id`` / ``cls`` members (plus the first image), and cached with an atomic write (temp file +
rename).
"""

from __future__ import annotations

import contextlib
import json
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from components.data.sources.decode import image_info
from components.errors import DataError

__all__ = [
    "IMAGE_KEYS",
    "INDEX_NAME",
    "ShardIndex",
    "atomic_write_table",
    "list_shards",
    "load_or_build_index",
    "scan_shards",
    "shard_stats",
    "split_member_name",
    "write_index",
]

INDEX_NAME = "index.parquet"
#: Sample members holding the image, in order of preference.
IMAGE_KEYS = ("png", "jpg", "jpeg", "webp", "npy")
_META_KEY = b"bctflow"
_REWRITE = "rewrite the shard (write_webdataset) or remove it"


@dataclass(frozen=True)
class ShardIndex:
    """shards: tar file names in shard order; shard (N,) int64 index into ``shards``; position (N,) int64 within
    the shard; ids / labels (N,) int64; offset (N,) int64 byte offset of the sample's first member header in its
    tar. meta: channels, height, width (of the first image), class_names, stats."""

    shards: tuple[str, ...]
    shard: np.ndarray
    position: np.ndarray
    ids: np.ndarray
    labels: np.ndarray
    offset: np.ndarray
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)


def list_shards(folder: Path) -> list[Path]:
    """The ``*.tar`` files of ``folder``, sorted by name; DataError when the folder is missing or holds none."""
    if not folder.is_dir():
        raise DataError(
            f"WebDataset folder {folder} does not exist; point the webdataset source at a folder of .tar shards"
        )
    shards = sorted(p for p in folder.iterdir() if p.suffix == ".tar" and p.is_file() and not p.name.startswith("."))
    if not shards:
        raise DataError(f"WebDataset folder {folder} holds no .tar shards; write them with write_webdataset()")
    return shards


def shard_stats(shards: list[Path]) -> dict[str, list[int]]:
    """{file name: [size, mtime_ns]} of the shards."""
    return {p.name: [(st := p.stat()).st_size, st.st_mtime_ns] for p in shards}


def atomic_write_table(table: pa.Table, path: Path) -> None:
    """Write ``table`` as Parquet (``.csv``: CSV) to a temp file beside ``path``, then rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        if path.suffix.lower() == ".csv":
            import pyarrow.csv as pacsv

            pacsv.write_csv(table, tmp)
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_index(folder: Path, index: ShardIndex) -> None:
    """Write ``index`` to ``folder/index.parquet`` atomically (its ``meta`` into the schema metadata)."""
    names = np.asarray(index.shards, dtype=object)[index.shard] if len(index) else np.empty(0, dtype=object)
    table = pa.table(
        {
            "shard": pa.array(names.tolist(), pa.string()).dictionary_encode(),
            "id": pa.array(index.ids, pa.int64()),
            "label": pa.array(index.labels, pa.int64()),
            "position": pa.array(index.position, pa.int64()),
            "offset": pa.array(index.offset, pa.int64()),
        }
    )
    meta = {**index.meta, "shards": list(index.shards)}
    atomic_write_table(table.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()}), folder / INDEX_NAME)


def read_index(folder: Path, shards: list[Path]) -> ShardIndex | None:
    """The cached index of ``folder`` if present and matching the shards' names, sizes and mtimes, else None."""
    import pyarrow.parquet as pq

    path = folder / INDEX_NAME
    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError):
        return None  # unreadable cache: rebuilt
    meta = json.loads((table.schema.metadata or {}).get(_META_KEY, b"{}"))
    if meta.get("stats") != shard_stats(shards) or not {"shard", "id", "label", "position", "offset"} <= set(
        table.column_names
    ):
        return None
    names = [p.name for p in shards]
    lookup = {n: i for i, n in enumerate(names)}
    parts = []
    for chunk in table.column("shard").chunks:  # per chunk: names → indices through its dictionary
        enc = chunk.cast(pa.string()).dictionary_encode()
        to_shard = np.array([lookup.get(n, -1) for n in enc.dictionary.to_pylist()] + [-1], dtype=np.int64)
        parts.append(to_shard[np.asarray(enc.indices.fill_null(-1).to_numpy(), dtype=np.int64)])
    shard = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    if (shard < 0).any():
        return None
    return ShardIndex(
        tuple(names),
        shard,
        np.array(table.column("position").to_numpy(), dtype=np.int64),
        np.array(table.column("id").to_numpy(), dtype=np.int64),
        np.array(table.column("label").to_numpy(), dtype=np.int64),
        np.array(table.column("offset").to_numpy(), dtype=np.int64),
        {k: v for k, v in meta.items() if k != "shards"},
    )


def split_member_name(fname: str) -> tuple[str, str] | None:
    """(key, extension) of a tar member name like WebDataset's grouping: the key ends at the basename's first dot."""
    slash = fname.rfind("/") + 1
    dot = fname.find(".", slash)
    return None if dot < 0 else (fname[:dot], fname[dot + 1 :].lower())


def _int_member(data: bytes, shard: Path, member: str) -> int:
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError) as e:
        raise DataError(f"member {member} of shard {shard} is {data[:20]!r}, not an integer; {_REWRITE}") from e


def _scan_one(shard: Path, first_image: list) -> tuple[list[int], list[int], list[int]]:
    """(ids, labels, offsets) of the samples of one shard in order (offset: the sample's first member header);
    fills ``first_image`` with the first image's bytes."""
    ids: list[int] = []
    labels: list[int] = []
    offsets: list[int] = []
    key = None
    start = 0
    sample: dict[str, int | bool] = {}

    def close() -> None:
        if key is None:
            return
        if "id" not in sample:
            raise DataError(f"sample {key!r} of shard {shard} has no .id member; {_REWRITE}")
        if not sample.get("image"):
            raise DataError(f"sample {key!r} of shard {shard} has no image ({', '.join(IMAGE_KEYS)}); {_REWRITE}")
        ids.append(int(sample["id"]))
        labels.append(int(sample.get("cls", -1)))
        offsets.append(start)

    try:
        with tarfile.open(shard, "r:") as tf:
            while (ti := tf.next()) is not None:
                tf.members = []  # keep memory flat on big shards
                parts = split_member_name(ti.name) if ti.isreg() else None
                if parts is None:
                    continue
                if parts[0] != key:
                    close()
                    key, sample, start = parts[0], {}, ti.offset
                ext = parts[1]
                if ext in ("id", "cls"):
                    sample[ext] = _int_member(tf.extractfile(ti).read(), shard, ti.name)
                elif ext in IMAGE_KEYS:
                    sample["image"] = True
                    if not first_image:
                        first_image += [tf.extractfile(ti).read(), f"{shard}:{ti.name}"]
            close()
    except (tarfile.TarError, OSError, EOFError) as e:
        raise DataError(f"cannot read shard {shard} ({type(e).__name__}: {e}); {_REWRITE}") from e
    return ids, labels, offsets


def scan_shards(shards: list[Path]) -> ShardIndex:
    """Build the index of ``shards`` by one pass over the tars, reading only the ``id`` / ``cls`` members."""
    all_ids, all_labels, all_offsets, shard, position = [], [], [], [], []
    first: list = []
    for s, path in enumerate(shards):
        ids, labels, offsets = _scan_one(path, first)
        all_ids += ids
        all_labels += labels
        all_offsets += offsets
        shard.append(np.full(len(ids), s, dtype=np.int64))
        position.append(np.arange(len(ids), dtype=np.int64))
    meta: dict = {"stats": shard_stats(shards)}
    if first:
        c, h, w = image_info(first[0], name=first[1], hint=_REWRITE)
        meta.update(channels=c, height=h, width=w)
    return ShardIndex(
        tuple(p.name for p in shards),
        np.concatenate(shard) if shard else np.empty(0, dtype=np.int64),
        np.concatenate(position) if position else np.empty(0, dtype=np.int64),
        np.asarray(all_ids, dtype=np.int64),
        np.asarray(all_labels, dtype=np.int64),
        np.asarray(all_offsets, dtype=np.int64),
        meta,
    )


def load_or_build_index(folder: Path) -> ShardIndex:
    """The index of the shards in ``folder``: the cached ``index.parquet`` when it matches the shards, else a
    fresh scan, cached atomically (kept in memory only when the folder is read-only)."""
    shards = list_shards(folder)
    index = read_index(folder, shards)
    if index is not None:
        return index
    old_names = _old_class_names(folder)
    index = scan_shards(shards)
    if old_names is not None:
        index.meta["class_names"] = old_names
    with contextlib.suppress(OSError):  # a read-only corpus: the index lives in memory
        write_index(folder, index)
    return index


def _old_class_names(folder: Path) -> list[str] | None:
    """Class names recorded in a stale index (kept across a rebuild), if any."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_schema(folder / INDEX_NAME).metadata or {}
        return json.loads(meta.get(_META_KEY, b"{}")).get("class_names")
    except (pa.ArrowException, OSError, ValueError):
        return None
