"""The one chunked gallery pipeline (docs/design.md §7.10): embed a gallery source into a part store, index it.

Every gallery goes through it: each role's evaluation gallery (the labelled evaluation split), generation 0's
serving corpus, and both again in every backfill.

* :func:`embed_gallery` — the items of a :class:`~flows.gallery.data.GallerySource` (all, or the positions a backfill
  selected), embedded by a checkpoint through the source's DataLoader in batches of ``train.eval_batch_size`` and
  written as they are produced into a part store of ``backfill.chunk_size`` items per part, every row stamped with
  the generation that embedded it. Resumable: the parts a killed run finished are kept and their items skipped, so
  a kill loses only the rows not yet in a finished part (the part being filled and the batch being embedded); parts
  of another model or source are stale and the store starts over. ``throttle`` seconds pass after each part (a
  backfill sparing a shared device). The crash point ``embed.half_parts`` lies after the part that takes the store
  past half of its items.
* :func:`index_gallery` — a finished store's stamped rows written into the gallery store (params ``gallery.store``:
  FAISS files, or a vector database), indexed, attached in the version's index folder, opened back and verified
  (count and generation; opening checks the manifest, checksums, the store's rows); an index that serves is refused
  below ``index.min_recall``.
* :func:`corpus_metrics` — the retrieval quality of a labelled serving corpus.

Part stores are written through :class:`~components.indexing.parts.PartWriter` and read through
:class:`~components.indexing.parts.GalleryParts`; what makes them searchable is the one seam
:class:`~components.indexing.backend.VectorStore`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from components.errors import ConfigError, IndexIntegrityError
from components.evaluation import retrieval_metrics
from components.evaluation.topk import topk_metrics
from components.faults import crash_point
from components.indexing.backend import SearchIndex
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.parts import GalleryParts, PartWriter, StoredPart
from components.io import file_sha256
from components.models import load_model
from components.training import embed_stream
from components.training.device import cuda_available
from flows.gallery.data import GallerySource
from flows.params import Params
from flows.params.specs import collection_name, gallery_store, index_options

__all__ = [
    "ChunkRun",
    "Embedded",
    "check_index_recall",
    "chunk_runs",
    "corpus_metrics",
    "embed_gallery",
    "embed_run",
    "embed_some",
    "finish_parts",
    "index_gallery",
]


@dataclass(frozen=True)
class Embedded:
    """A finished part store and what this call did: ``items`` embedded now in ``seconds`` (the whole call),
    ``parts_resumed`` finished by an earlier run (kept), ``parts`` in all; ``startup_s``: the seconds of the call
    until its first batch was embedded (the model loaded, the DataLoader workers started, the first batch read)."""

    store: GalleryParts
    items: int
    seconds: float
    parts_resumed: int
    parts: int
    startup_s: float = 0.0
    first_batch: int = 0

    @classmethod
    def of(
        cls, store: GalleryParts, items: int, seconds: float, resumed: int, startup_s: float = 0.0, first_batch: int = 0
    ) -> Embedded:
        """What an embedding call did, with the part count of the ``store`` it finished."""
        return cls(store, items, seconds, resumed, len(store.part_paths()), startup_s, first_batch)

    @property
    def items_per_s(self) -> float:
        """The embedding rate once started: the items after the first batch over the seconds after it. The start-up
        is the same for 10k items and 1M, so a rate that counted it would make a small (partial) backfill look
        slower per item than a big one; a call of one batch has no such rate and gets items over seconds."""
        after = self.items - self.first_batch
        if after <= 0 or self.seconds <= self.startup_s:
            return self.items / max(self.seconds, 1e-9)
        return after / (self.seconds - self.startup_s)


def _producer(source: GallerySource, checkpoint: Path, selected: np.ndarray) -> str:
    """What embeds a store's rows: the model's bytes and the items it embeds — the ids and labels at the ``selected``
    positions, at the split's image size. An item is its id (as an ingest counts it): a corpus that grows by appended
    items keeps the parts written before (a re-embedding carried over nights while new items arrive), one whose
    selected items changed starts over."""
    split = source.split
    items = hashlib.sha256(np.ascontiguousarray(split.ids[selected], np.int64).tobytes())
    items.update(np.ascontiguousarray(split.labels[selected], np.int64).tobytes())
    return f"model sha256 {file_sha256(checkpoint)}; {source.kind} items {items.hexdigest()} at {split.image_size}px"


@dataclass(frozen=True)
class ChunkRun:
    """Consecutive parts ``first``… of a part store still to write: ``positions`` (int64, in the source's split) are
    the items they hold, in order — part ``first + i`` holds items ``i·chunk_size … (i+1)·chunk_size − 1`` of it."""

    first: int
    positions: np.ndarray
    total: int = 0  # the parts of the whole store (the crash point ``embed.half_parts`` lies in the one past half)

    def part_range(self, chunk_size: int) -> range:
        """The part numbers this run writes."""
        return range(self.first, self.first - (-len(self.positions) // chunk_size))


def chunk_runs(
    p: Params,
    source: GallerySource,
    checkpoint: Path,
    out: Path,
    positions: np.ndarray | None = None,
    per_run: int | None = None,
) -> tuple[list[ChunkRun], int]:
    """What is left of embedding the items of ``source`` at ``positions`` (all when None) into the part store
    ``out``: chunk k of the items is part k, so the parts not written yet, as runs of at most ``per_run``
    consecutive parts (None: no limit), and how many parts an earlier run finished. Parts of another model or
    source are stale and deleted here (call it once, before any run is embedded)."""
    cs = p.backfill.chunk_size
    selected = np.arange(len(source.split), dtype=np.int64) if positions is None else np.asarray(positions, np.int64)
    writer = PartWriter(out, cs, producer=_producer(source, checkpoint, selected))
    n_parts = -(-len(selected) // cs)
    missing = writer.missing_parts(n_parts)
    runs: list[list[int]] = []
    for k in missing:
        if runs and runs[-1][-1] == k - 1 and (per_run is None or len(runs[-1]) < per_run):
            runs[-1].append(k)
        else:
            runs.append([k])
    return [ChunkRun(r[0], selected[r[0] * cs : (r[-1] + 1) * cs], n_parts) for r in runs], n_parts - len(missing)


#: the model a process embeds with, loaded once: (checkpoint path, its sha256) → model
_LOADED: dict[tuple[str, str | None], Any] = {}


def _model(checkpoint: Path, sha256: str | None) -> Any:
    """The model at ``checkpoint``, loaded once per process (a cluster worker embeds many runs with it); with
    ``sha256``, refused unless the file is the one the backfill planned with."""
    key = (str(checkpoint), sha256)
    if key not in _LOADED:
        if sha256 is not None and file_sha256(checkpoint) != sha256:
            raise IndexIntegrityError(
                f"{checkpoint} is not the model this backfill planned with (sha256 differs); restore it or start "
                "the backfill again"
            )
        _LOADED.clear()
        _LOADED[key] = load_model(checkpoint)
    return _LOADED[key]


def embed_run(
    p: Params,
    source: GallerySource,
    checkpoint: Path,
    out: Path,
    run: ChunkRun,
    *,
    generation: int,
    sha256: str | None = None,
    loader_workers: int | None = None,
    on_batch: Callable[[int], None] | None = None,
    throttle: float = 0.0,
    crash_points: bool = True,
) -> int:
    """Embed ``run``'s items with ``checkpoint`` into its parts of ``out``, each row stamped ``generation``; other
    runs may be written beside it at the same time (a cluster). ``loader_workers``: DataLoader processes (None: the
    source's). Returns the items embedded."""
    model = _model(checkpoint, sha256)
    curvature = float(model.curvature)
    writer = PartWriter(out, p.backfill.chunk_size, first_part=run.first)
    loader = source.split.subset(run.positions).loader(
        batch_size=p.train.eval_batch_size,
        workers=source.workers if loader_workers is None else loader_workers,
        pin_memory=cuda_available(),
    )
    written = [run.first]  # the part the writer writes next

    def on_part() -> None:  # a part is written: the crash point after the part past half the store's items; throttle
        if crash_points and written[0] == (run.total - 1) // 2:
            crash_point("embed.half_parts")
        written[0] += 1
        if throttle > 0:
            time.sleep(throttle)

    embedded = 0
    for emb, labels, ids in embed_stream(model, loader, p.train.device, p.train.precision):
        rows = GalleryEmbeddings.from_embeddings(emb, model.spec, curvature, ids, labels)
        writer.add(StoredPart(rows, np.full(len(ids), generation, dtype=np.int64)), on_part=on_part)
        embedded += len(ids)
        if on_batch is not None:
            on_batch(len(ids))
    writer.flush()
    return embedded


def finish_parts(p: Params, out: Path) -> GalleryParts:
    """The part store ``out`` once every run is written: ``store.json`` listing its parts (ids checked unique)."""
    return PartWriter(out, p.backfill.chunk_size).finish()


def embed_some(
    p: Params,
    source: GallerySource,
    checkpoint: Path,
    out: Path,
    *,
    generation: int,
    positions: np.ndarray,
    max_items: int,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Embed at most ``max_items`` more of the items at ``positions`` into the part store ``out`` (whole parts, in
    part order, resuming what is there) and stop, unfinished: a re-embedding spread over several runs (a night's
    budget). Returns (items embedded now, items still to embed); :func:`embed_gallery` finishes the store."""
    cs = p.backfill.chunk_size
    runs, _ = chunk_runs(p, source, checkpoint, out, positions)
    budget, embedded, left = max(0, int(max_items)), 0, 0
    for r in runs:
        take = min(len(r.positions), (budget // cs) * cs if budget < len(r.positions) else len(r.positions))
        if take:
            part = ChunkRun(r.first, r.positions[:take], r.total)
            embedded += embed_run(p, source, checkpoint, out, part, generation=generation, on_batch=on_batch,
                                  crash_points=False)  # fmt: skip
            budget -= take
        left += len(r.positions) - take
    return embedded, left


def embed_gallery(
    p: Params,
    source: GallerySource,
    checkpoint: Path,
    out: Path,
    *,
    generation: int,
    positions: np.ndarray | None = None,
    on_batch: Callable[[int], None] | None = None,
    throttle: float = 0.0,
    crash_points: bool = True,
) -> Embedded:
    """Embed the items of ``source`` at ``positions`` (positions in its split, all when None) with ``checkpoint``
    into the part store ``out`` in this process, each row stamped ``generation``; resumes a store a killed run left
    there (the parts it finished are kept). ``crash_points=False``: the crash point ``embed.half_parts`` is not armed
    (the backfill plan's measurement on a sample)."""
    t0 = time.perf_counter()
    runs, resumed = chunk_runs(p, source, checkpoint, out, positions)
    first: list[tuple[float, int]] = []  # (seconds until the first batch was embedded, its items)

    def batch(n: int) -> None:
        if not first:
            first.append((time.perf_counter() - t0, n))
        if on_batch is not None:
            on_batch(n)

    embedded = sum(
        embed_run(
            p,
            source,
            checkpoint,
            out,
            r,
            generation=generation,
            on_batch=batch,
            throttle=throttle,
            crash_points=crash_points,
        )
        for r in runs
    )
    _LOADED.clear()  # this process embeds no more with it
    store = finish_parts(p, out)
    startup, first_batch = first[0] if first else (0.0, 0)
    seconds = time.perf_counter() - t0
    return Embedded.of(store, embedded, seconds, resumed, startup, first_batch)


def index_gallery(
    p: Params,
    home: Path,
    store: GalleryParts,
    out: Path,
    *,
    generation: int,
    version: int = 0,
    corpus: bool = False,
    compatible: list[int] | None = None,
    serving: bool = False,
) -> SearchIndex:
    """Write ``store``'s stamped rows into the params' gallery store (``gallery.store``), build its index and attach
    it in ``out`` (:meth:`~components.indexing.backend.Collection.build`), then verify it: every row of the store,
    for ``generation``. ``version``/``corpus`` name the store's collection
    (:func:`~flows.params.specs.collection_name`).
    ``serving``: it answers the live gallery's queries, so its measured recall@10 must reach ``index.min_recall``.
    Returns the opened index."""
    collection = gallery_store(p, home).collection(collection_name(p, generation, version, corpus), out)
    index = collection.build(store, generation=generation, options=index_options(p), compatible=compatible)
    if index.ntotal != len(store) or index.manifest.generation != generation:
        raise IndexIntegrityError(
            f"the index in {out} holds {index.ntotal} vectors for generation {index.manifest.generation}, expected "
            f"{len(store)} for generation {generation}; delete it and build it again"
        )
    if serving:
        check_index_recall(p, index, out)
    return index


def check_index_recall(p: Params, index: SearchIndex, where: Path) -> None:
    """Refuse to publish a live index whose measured recall@10 is below ``index.min_recall``."""
    floor, recall = p.index.min_recall, index.manifest.recall_at_10
    if floor is not None and recall is not None and recall < floor:
        raise ConfigError(
            f"the {index.manifest.index_type} index in {where} reaches recall@10 {recall:.3f} against exact search, "
            f"below index.min_recall {floor}; raise index.nprobe / index.ef_search, or use index.type flat"
        )


def corpus_metrics(p: Params, store: GalleryParts, index: SearchIndex, *, seed: int = 0) -> dict[str, float]:
    """Retrieval quality of a labelled corpus: exact leave-one-out (≤ evaluation.exact_max_items items) or top-k from
    its index on ``gallery.metric_queries`` sampled items. Unlabelled corpora have none ({})."""
    labels = store.column("labels")
    if (labels < 0).any():
        return {}
    ks = p.evaluation.cmc_k
    if len(store) <= p.evaluation.exact_max_items:
        whole = store.embeddings()
        vecs = whole.vectors()
        res = retrieval_metrics(vecs, whole.labels, whole.ids, vecs, whole.labels, whole.ids, whole.retrieval_space, ks)
        return {f"corpus/{k}": float(v) for k, v in res.items() if k != "n_queries"}
    ids = store.column("ids")
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(store), size=min(p.gallery.metric_queries, len(store)), replace=False))
    queries, q_ids, q_labels, start = [], [], [], 0
    for part in store.parts():
        n = len(part)
        rows = pick[(pick >= start) & (pick < start + n)] - start
        if rows.size:
            queries.append(part.gallery.vectors()[rows])
            q_ids.append(part.gallery.ids[rows])
            q_labels.append(part.gallery.labels[rows])
        start += n
    k = max(max(ks), 100) + 1
    _, found = index.search(np.concatenate(queries), k)
    res = topk_metrics(found, np.concatenate(q_ids), np.concatenate(q_labels), ids, labels, ks=tuple(ks))
    return {f"corpus/{key}": float(v) for key, v in res.items() if key != "n_queries"}
