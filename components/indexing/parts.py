"""A gallery's embeddings on disk, in parts (docs/design.md §7.10): the part store every gallery is written to.

Every gallery — the labelled evaluation split a generation is measured on, a serving corpus of millions of items,
the re-embedded items of a backfill — is written as it is produced, ``chunk_size`` items per part file
(``parts/part-NNNNN.npz``, each a :class:`GalleryEmbeddings` plus the generation ``stamps`` of its rows and, for
rows a gallery transform carried from an older generation's vectors, the lineage ``bridges`` that did), every part
written atomically. A killed embedding keeps every finished part; :meth:`PartWriter.missing_parts` tells the
resumed run which parts (chunk k of the items is part k) are still to write. ``producer.txt`` names what embedded
the parts (the model's sha256, the source's fingerprint): parts of another producer are stale and a writer opened
for a new one starts over. :meth:`PartWriter.finish` writes
``store.json`` (the parts in order with their counts and sha256, the geometry) last: a store without it is
unfinished. The sha256 of ``store.json`` (:meth:`GalleryParts.digest`) therefore pins the whole gallery — the lineage
records it for each evaluation gallery — and :meth:`GalleryParts.verify` checks the parts against it.

Readers stream: :meth:`GalleryParts.parts` yields one part at a time, :meth:`GalleryParts.index_chunks` the
retrieval vectors FAISS indexes; :meth:`GalleryParts.embeddings` puts a small gallery (the evaluation split) in
memory. A gallery written before part stores (one ``gallery.npz``, its stamps in ``stamps.npy`` beside it) reads
as a store of one part.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from components.errors import IndexIntegrityError
from components.indexing.gallery import GalleryEmbeddings, read_npz
from components.indexing.mixed import item_uncertainty, mix_galleries
from components.io import atomic_write_text, file_sha256

__all__ = [
    "STORE_FILE",
    "GalleryParts",
    "PartWriter",
    "StoredPart",
    "append_stores",
    "link_store",
    "mix_stores",
]

STORE_FILE = "store.json"
_PARTS = "parts"
_PRODUCER = "producer.txt"


@dataclass(frozen=True)
class StoredPart:
    """One part: ``gallery`` (n items), ``stamps`` (n,) int64, the generation whose space each row is in, and
    ``bridges`` (n,) int64, the lineage bridge that carried each row there from an older generation's vector (a
    gallery transform; 0: the row was embedded by its generation's model; None: no row was carried)."""

    gallery: GalleryEmbeddings
    stamps: np.ndarray
    bridges: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.gallery)

    def bridge_ids(self) -> np.ndarray:
        """(n,) int64: ``bridges``, zeros where no row was carried."""
        return np.zeros(len(self), np.int64) if self.bridges is None else self.bridges.astype(np.int64)


def _save_part(path: Path, part: StoredPart) -> None:
    carried = {} if part.bridges is None or not part.bridges.any() else {"bridges": part.bridge_ids()}
    part.gallery.save(path, stamps=part.stamps.astype(np.int64), **carried)


def _load_part(path: Path) -> StoredPart:
    gallery, extra = GalleryEmbeddings.load_with(path, "stamps", optional=("bridges",))
    return StoredPart(gallery, extra["stamps"], extra.get("bridges"))


def _concat(parts: list[StoredPart]) -> StoredPart:
    """The rows of ``parts`` as one part. Logits are kept when every part has the same width (one class count), else
    dropped, width 0 (as :func:`~components.indexing.mixed.mix_galleries` does): an ingest into a gallery a partial
    backfill mixed appends rows with logits to rows without."""
    if len({p.gallery.logits.shape[1] for p in parts}) > 1:
        parts = [StoredPart(replace(p.gallery, logits=np.zeros((len(p), 0), np.float32)), p.stamps, p.bridges)
                 for p in parts]  # fmt: skip
    first = parts[0].gallery
    cat = {name: np.concatenate([getattr(p.gallery, name) for p in parts]) for name in _ROW_FIELDS}
    carried = None if all(p.bridges is None for p in parts) else np.concatenate([p.bridge_ids() for p in parts])
    return StoredPart(replace(first, **cat), np.concatenate([p.stamps for p in parts]), carried)


_ROW_FIELDS = ("z", "emb", "ids", "labels", "clipped", "logits")
#: per-item arrays a part file holds under their own name (read without loading the vectors)
_STORED_COLUMNS = ("ids", "labels", "clipped", "stamps", "bridges")


def _take(part: StoredPart, rows: slice | np.ndarray) -> StoredPart:
    g = part.gallery
    carried = None if part.bridges is None else part.bridges[rows]
    return StoredPart(replace(g, **{name: getattr(g, name)[rows] for name in _ROW_FIELDS}), part.stamps[rows], carried)


def _full_chunks(pending: list[StoredPart], size: int) -> tuple[list[StoredPart], list[StoredPart]]:
    """The rows of ``pending`` (in order) cut into chunks of ``size``: (the full chunks, the rest — fewer than
    ``size`` rows, as at most one part; [] when none is left)."""
    held = sum(len(p) for p in pending)
    if held < size:
        return [], pending
    rows = _concat(pending)
    cut = held - held % size
    chunks = [_take(rows, slice(i, i + size)) for i in range(0, cut, size)]
    return chunks, [_take(rows, slice(cut, None))] if cut < held else []


class PartWriter:
    """Writes a gallery store part by part into ``directory``; reopening it resumes (finished parts are kept).

    ``producer``: what embeds the rows (e.g. the model's sha256 and the source's fingerprint). Parts an earlier run
    left for another producer are stale (a model trained again in staging): they are deleted and the store starts
    over. None: no check (the rows are not embedded, e.g. a mix of two stores).
    """

    def __init__(
        self, directory: Path, chunk_size: int, producer: str | None = None, first_part: int | None = None
    ) -> None:
        """``first_part``: the number of the first part this writer writes (a cluster task writing chunks
        ``first_part…`` of a store other tasks fill beside it); None: after the parts already there."""
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.directory = Path(directory)
        self.chunk_size = int(chunk_size)
        if producer is not None:
            mark = self.directory / _PRODUCER
            if not mark.is_file() or mark.read_text() != producer:
                shutil.rmtree(self.directory / _PARTS, ignore_errors=True)
                (self.directory / STORE_FILE).unlink(missing_ok=True)
                self.directory.mkdir(parents=True, exist_ok=True)
                atomic_write_text(mark, producer)
        (self.directory / _PARTS).mkdir(parents=True, exist_ok=True)
        self._pending: list[StoredPart] = []
        self._next = len(self.part_files()) if first_part is None else int(first_part)

    def part_files(self) -> list[Path]:
        """The finished parts, in part-number order (part k holds chunk k of the items in their embedding order)."""
        return sorted((self.directory / _PARTS).glob("part-*.npz"))

    def missing_parts(self, n_parts: int) -> list[int]:
        """The numbers below ``n_parts`` of the parts not written yet (chunk k of the items is part k)."""
        have = {int(f.stem.removeprefix("part-")) for f in self.part_files()}
        return [k for k in range(n_parts) if k not in have]

    def add(self, part: StoredPart, on_part: Callable[[], None] | None = None) -> None:
        """Buffer rows; every full ``chunk_size`` rows become one part file (``on_part()`` after each is written)."""
        chunks, self._pending = _full_chunks([*self._pending, part], self.chunk_size)
        for chunk in chunks:
            self._write(chunk)
            if on_part is not None:
                on_part()

    def _write(self, part: StoredPart) -> None:
        _save_part(self.directory / _PARTS / f"part-{self._next:05d}.npz", part)
        self._next += 1

    def flush(self) -> None:
        """Write the buffered rows (fewer than ``chunk_size``: the last chunk) as one part; no ``store.json``."""
        if self._pending:
            self._write(_concat(self._pending))
            self._pending = []

    def finish(self) -> GalleryParts:
        """Write the remaining rows and ``store.json`` (checking ids are unique); returns the store."""
        self.flush()
        files = self.part_files()
        if not files:
            raise IndexIntegrityError(f"no gallery parts were written to {self.directory}; the gallery source is empty")
        counts, meta, ids = [], None, []
        for f in files:
            with read_npz(f) as arrays:
                counts.append(len(arrays["ids"]))
                ids.append(arrays["ids"])
                if meta is None:
                    meta = {
                        "geometry": str(arrays["geometry"]),
                        "curvature": float(arrays["curvature"]),
                        "features": str(arrays["features"]),
                        "width": int(arrays["z"].shape[1]),
                    }
        all_ids = np.concatenate(ids)
        if np.unique(all_ids).size != all_ids.size:
            raise IndexIntegrityError(
                f"the gallery parts in {self.directory} hold duplicate ids; delete the folder and embed again"
            )
        parts = [[f.name, c, file_sha256(f)] for f, c in zip(files, counts)]
        body = {**(meta or {}), "count": int(sum(counts)), "parts": parts}
        atomic_write_text(self.directory / STORE_FILE, json.dumps(body, indent=1) + "\n")
        return GalleryParts(self.directory)


class GalleryParts:
    """A finished gallery store (``store.json`` + ``parts/``), or a legacy single ``gallery.npz`` (+ ``stamps.npy``).

    ``generation``: the stamp of rows written without stamps (legacy single-file galleries: the generation whose
    folder or live index version holds them).
    """

    def __init__(self, path: Path, generation: int = -1) -> None:
        self.path = Path(path)
        self._generation = generation
        if self.path.is_dir():
            meta_path = self.path / STORE_FILE
            if not meta_path.is_file():
                raise IndexIntegrityError(
                    f"{self.path} holds no {STORE_FILE}: the gallery embedding never finished; run it again to resume"
                )
            try:
                meta = json.loads(meta_path.read_text())
                self.meta = {**meta, "count": int(meta["count"]), "parts": list(meta["parts"])}
            except (ValueError, KeyError, TypeError) as err:
                raise IndexIntegrityError(
                    f"{meta_path} is damaged ({type(err).__name__}); restore {self.path} from a backup or re-embed it"
                ) from None
        elif self.path.is_file():
            with read_npz(self.path) as f:
                self.meta = {"count": len(f["ids"]), "parts": None}
        else:
            raise IndexIntegrityError(f"gallery {self.path} is missing; re-embed that gallery")

    def __len__(self) -> int:
        return int(self.meta["count"])

    @property
    def legacy(self) -> bool:
        """True for a gallery written before part stores: one ``gallery.npz`` (+ ``stamps.npy``)."""
        return self.meta["parts"] is None

    def part_paths(self) -> list[Path]:
        if self.meta["parts"] is None:
            return [self.path]
        return [self.path / _PARTS / entry[0] for entry in self.meta["parts"]]

    def digest(self) -> str:
        """The sha256 that pins this gallery: of ``store.json``, which lists every part's sha256 (of the file itself
        for a legacy single-file gallery)."""
        return file_sha256(self.path if self.legacy else self.path / STORE_FILE)

    def verify(self) -> None:
        """Every part is the file ``store.json`` lists (its sha256; a store written before parts had one: a readable
        part of the listed count). IndexIntegrityError naming the part otherwise."""
        if self.legacy:
            GalleryEmbeddings.load(self.path)  # one small file: readable whole
            return
        for entry, path in zip(self.meta["parts"], self.part_paths()):
            if len(entry) > 2 and (not path.is_file() or file_sha256(path) != entry[2]):
                raise IndexIntegrityError(
                    f"gallery part {path} is not the file {self.path / STORE_FILE} lists (sha256 {entry[2][:12]}…): it "
                    f"is missing, replaced or damaged; restore {self.path} from a backup or re-embed it"
                )
            if len(entry) <= 2:
                with read_npz(path) as f:
                    if len(f["ids"]) != entry[1]:
                        raise IndexIntegrityError(
                            f"gallery part {path} holds {len(f['ids'])} items, {self.path / STORE_FILE} lists "
                            f"{entry[1]}; restore {self.path} from a backup or re-embed it"
                        )

    def part_sizes(self) -> list[int]:
        """The rows of each part, in order, as ``store.json`` lists them (no part is read)."""
        return [len(self)] if self.legacy else [int(entry[1]) for entry in self.meta["parts"]]

    def parts(self, start: int = 0) -> Iterator[StoredPart]:
        """Each part in order from part ``start`` (one in memory at a time)."""
        if self.meta["parts"] is None:
            if start > 0:
                return
            g = GalleryEmbeddings.load(self.path)
            stamps_file = self.path.parent / "stamps.npy"
            stamps = np.load(stamps_file) if stamps_file.exists() else np.full(len(g), self._generation, np.int64)
            yield StoredPart(g, stamps)
            return
        for p in self.part_paths()[start:]:
            yield _load_part(p)

    def column(self, name: str) -> np.ndarray:
        """One per-item array over the whole store, (N,): ``ids``, ``labels``, ``clipped``, ``stamps``, ``bridges``
        (read alone from each part; ``bridges`` 0 where a row was not carried by a bridge) or ``uncertainty``
        (:func:`~components.indexing.mixed.item_uncertainty`, Lorentz galleries only)."""
        return self.columns(name)[name]

    def columns(self, *names: str) -> dict[str, np.ndarray]:
        """Several of :meth:`column`'s arrays, each (N,), read in one pass over the parts (the stored ones without
        loading the vectors)."""
        out: dict[str, list[np.ndarray]] = {name: [] for name in names}
        if all(name in _STORED_COLUMNS for name in names) and not self.legacy:
            for path in self.part_paths():
                with read_npz(path) as arrays:  # a part no transform carried has no bridges: zeros
                    for name in names:
                        has = name != "bridges" or "bridges" in arrays.files
                        out[name].append(arrays[name] if has else np.zeros(len(arrays["ids"]), np.int64))
            return {name: np.concatenate(v) for name, v in out.items()}
        for part in self.parts():
            for name in names:
                if name == "stamps":
                    out[name].append(part.stamps)
                elif name == "bridges":
                    out[name].append(part.bridge_ids())
                elif name == "uncertainty":
                    out[name].append(item_uncertainty(part.gallery))
                else:
                    out[name].append(getattr(part.gallery, name))
        return {name: np.concatenate(v) for name, v in out.items()}

    def windows(self, size: int) -> Iterator[StoredPart]:
        """The rows in store order, ``size`` at a time (the last window shorter), whatever the parts' sizes; one
        part (and one window) in memory at a time."""
        pending: list[StoredPart] = []
        for part in self.parts():
            chunks, pending = _full_chunks([*pending, part], size)
            yield from chunks
        if pending:
            yield _concat(pending)

    def load_all(self) -> StoredPart:
        """The whole store in memory (small galleries: exact evaluation)."""
        return _concat(list(self.parts()))

    def embeddings(self) -> GalleryEmbeddings:
        """Every row in memory, in store order (the evaluation split a generation is measured on)."""
        return self.load_all().gallery

    def index_chunks(self, curvature: float | None = None) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
        """A re-iterable source of (retrieval vectors float64 (n, D), ids (n,)) per part, for the index builder."""

        def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for part in self.parts():
                yield part.gallery.vectors(curvature), part.gallery.ids

        return chunks


def link_store(store: GalleryParts, directory: Path) -> GalleryParts:
    """The finished part store ``store`` under ``directory`` too: its parts hard-linked (no copy), ``store.json``
    last. A full backfill publishes its re-embedded parts this way; the work folder keeps its own links."""
    if store.legacy:
        raise IndexIntegrityError(f"{store.path} is a single-file gallery, not a part store; it cannot be linked")
    (directory / _PARTS).mkdir(parents=True, exist_ok=True)
    for src in store.part_paths():
        dst = directory / _PARTS / src.name
        if not dst.exists():
            os.link(src, dst)
    atomic_write_text(directory / STORE_FILE, (store.path / STORE_FILE).read_text())
    return GalleryParts(directory)


def append_stores(current: GalleryParts, new: GalleryParts, writer: PartWriter) -> GalleryParts:
    """``current``'s rows, then ``new``'s (an ingest: items the gallery did not hold, embedded by its own model),
    written through ``writer``, part by part; refused when ``new`` holds an id ``current`` has (the writer's
    finish checks that ids stay unique)."""
    for store in (current, new):
        for part in store.parts():
            writer.add(part)
    return writer.finish()


def mix_stores(current: GalleryParts, replacement: GalleryParts, writer: PartWriter) -> GalleryParts:
    """``current`` with the items of ``replacement`` (a partial backfill's re-embedded items) swapped in, part by
    part, written through ``writer``. ``replacement`` is held in memory (it is the re-embedded fraction); every id it
    holds must be in ``current``, and both must share one retrieval space (:func:`mix_galleries`)."""
    rep = replacement.load_all()
    order = np.argsort(rep.gallery.ids)
    rep_ids = rep.gallery.ids[order]
    found = 0
    for part in current.parts():
        if part.gallery.logits.shape[1] != rep.gallery.logits.shape[1]:  # as mix_galleries: logits of one width
            part = StoredPart(
                replace(part.gallery, logits=np.zeros((len(part), 0), np.float32)), part.stamps, part.bridges
            )
        ids = part.gallery.ids
        hit = np.isin(ids, rep_ids)
        if hit.any():
            rows = order[np.searchsorted(rep_ids, ids[hit])]
            sub = _take(rep, rows)
            stamps = part.stamps.copy()
            stamps[hit] = sub.stamps
            carried = None
            if part.bridges is not None or sub.bridges is not None:
                carried = part.bridge_ids().copy()
                carried[hit] = sub.bridge_ids()
            part = StoredPart(mix_galleries(part.gallery, sub.gallery, np.flatnonzero(hit)), stamps, carried)
            found += int(hit.sum())
        writer.add(part)
    if found != len(rep):
        raise IndexIntegrityError(
            f"{len(rep) - found} re-embedded items are not in the live gallery {current.path}; delete the backfill "
            "folder and run the backfill again"
        )
    return writer.finish()
