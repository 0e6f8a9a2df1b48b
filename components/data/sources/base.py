"""The interface every image source implements, and the helpers the sources share.

An :class:`ImageSource` is a corpus of images addressed by position ``0..N-1``.
Each item has a unique int64 id and an int64 label (``-1`` = unlabelled).
``ids`` / ``labels`` come from an index (never from decoding images);
:meth:`ImageSource.loader` streams the images through a torch ``DataLoader``
as batches ``(images uint8 (B, C, H, W), labels int64 (B,), ids int64 (B,))``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from components.data.batches import shard_bounds
from components.errors import DataError

T = TypeVar("T")

__all__ = [
    "BatchIndexSampler",
    "ImageSource",
    "LoaderOptions",
    "UnknownIdError",
    "check_unique_ids",
    "epoch_seed",
    "passthrough",
    "positions_of_ids",
    "worker_context",
]


class UnknownIdError(DataError, KeyError):
    """Ids asked for that the source does not hold (both a DataError and a KeyError)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def epoch_seed(seed: int, epoch: int, *extra: int) -> int:
    """A 63-bit seed derived from ``(seed, epoch, *extra)``: different per epoch, identical across runs."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(epoch) & 0xFFFFFFFF, *extra]).generate_state(2)
    return int((int(state[0]) << 32 | int(state[1])) & (2**63 - 1))


def positions_of_ids(ids: np.ndarray, order: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """Positions in ``ids`` of ``wanted`` ids; ``order`` = ``argsort(ids)``. Raises UnknownIdError naming examples."""
    wanted = np.asarray(wanted, dtype=np.int64).reshape(-1)
    if len(ids) == 0:
        if len(wanted):
            raise UnknownIdError(f"{len(wanted)} ids are not in {what} (it is empty), e.g. {wanted[:5].tolist()}")
        return np.empty(0, dtype=np.int64)
    pos = np.clip(np.searchsorted(ids, wanted, sorter=order), 0, len(ids) - 1)
    found = order[pos]
    bad = ids[found] != wanted
    if bad.any():
        raise UnknownIdError(
            f"{int(bad.sum())} ids are not in {what}, e.g. {wanted[bad][:5].tolist()}; "
            "ask only for ids of the source (source.ids)"
        )
    return found.astype(np.int64, copy=False)


def check_unique_ids(ids: np.ndarray, where: str, fix: str) -> None:
    """DataError naming a few duplicated ids of ``where`` (and ``fix``, how to make them unique) if there are any."""
    uniq, counts = np.unique(ids, return_counts=True)
    if len(uniq) != len(ids):
        dup = uniq[counts > 1]
        raise DataError(
            f"{where} has {len(dup)} duplicated ids, e.g. {dup[:5].tolist()}; every id must be unique: {fix}"
        )


def worker_context(workers: int) -> str | None:
    """The DataLoader ``multiprocessing_context`` of every source: ``forkserver`` workers, started from a fresh
    process, when there are any. A plain fork of a process that runs Prefect (its threads and handlers) died on
    start with exit code 1 (seen in the flows and the test suite)."""
    return "forkserver" if workers > 0 else None


def passthrough(batch: T) -> T:
    """Identity collate function for datasets that return whole batches (module level: workers pickle it)."""
    return batch


def _is_range(t: torch.Tensor) -> bool:
    return bool(torch.equal(t, torch.arange(len(t), dtype=t.dtype)))


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """How :meth:`ImageSource.loader` batches, orders and decodes (its keywords, checked once)."""

    batch_size: int
    shuffle: bool = False
    seed: int = 0
    epoch: int = 0
    workers: int = 0
    pin_memory: bool = False
    image_size: int | None = None
    drop_last: bool = False
    shard: tuple[int, int] = (0, 1)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise DataError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.image_size is not None and int(self.image_size) < 1:
            raise DataError(f"image_size must be a positive number of pixels, got {self.image_size}")

    @property
    def size(self) -> int | None:
        """``image_size`` as an int (None: native size)."""
        return None if self.image_size is None else int(self.image_size)

    def batched(self, dataset: object, selection: np.ndarray, loader: type[DataLoader] = DataLoader) -> DataLoader:
        """``loader`` over a map-style ``dataset`` that returns whole batches for index tensors: the batches of
        :class:`BatchIndexSampler` over ``selection``, decoded in ``workers`` processes."""
        sampler = BatchIndexSampler(
            selection,
            self.batch_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            drop_last=self.drop_last,
            shard=self.shard,
        )
        return loader(
            dataset,  # type: ignore[arg-type]
            sampler=sampler,
            batch_size=None,
            collate_fn=passthrough,
            num_workers=self.workers,
            pin_memory=self.pin_memory,
            multiprocessing_context=worker_context(self.workers),
        )


class BatchIndexSampler(Sampler[torch.Tensor]):
    """Yields int64 index tensors of ``batch_size`` positions: the selection in order, or permuted.

    The permutation is drawn from a generator seeded by ``(seed, epoch)`` in the main process, so the batches
    are the same for any number of workers. ``shard = (rank, world)``: every rank draws the same permutation and
    yields its contiguous part of each batch (the batches of ``batch_size`` are the global ones).
    """

    def __init__(
        self,
        positions: np.ndarray,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        epoch: int,
        drop_last: bool,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        if batch_size < 1:
            raise DataError(f"batch_size must be at least 1, got {batch_size}")
        self.positions = torch.from_numpy(np.array(positions, dtype=np.int64))
        self.batch_size = int(batch_size)
        self.shuffle, self.seed, self.epoch, self.drop_last = shuffle, seed, epoch, drop_last
        self.shard = shard
        n = len(self.positions)  # the selection 0..n-1 itself: a permutation needs no gather
        self._everything = bool(
            n == 0 or (self.positions[0] == 0 and self.positions[-1] == n - 1 and _is_range(self.positions))
        )

    def __len__(self) -> int:
        n = len(self.positions)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[torch.Tensor]:
        order = self.positions
        if self.shuffle:
            g = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
            perm = torch.randperm(len(order), generator=g)
            order = perm if self._everything else order.index_select(0, perm)
        chunks = order.split(self.batch_size) if len(order) else ()
        if self.drop_last and chunks and len(chunks[-1]) < self.batch_size:
            chunks = chunks[:-1]
        rank, world = self.shard
        if world > 1:
            chunks = tuple(c[slice(*shard_bounds(len(c), world, rank))] for c in chunks)
        return iter(chunks)


class ImageSource(ABC):
    """A corpus of images addressed by position 0..N-1; each item has a unique int64 id and an int64 label.

    Subclasses set ``name`` and implement the abstract members; ``labelled`` and ``item_positions`` are shared.
    """

    name: str
    #: what the path of a registered file-backed kind points at (:func:`~components.data.sources.catalog.create_source`
    #: names it when the path does not exist)
    path_form: ClassVar[str] = ""

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    @abstractmethod
    def ids(self) -> np.ndarray:
        """(N,) int64 unique item ids, read from an index (never by decoding images)."""

    @property
    @abstractmethod
    def labels(self) -> np.ndarray:
        """(N,) int64 class indices into ``class_names``; -1 where unlabelled."""

    @property
    def labelled(self) -> bool:
        """True when every item has a label (>= 0)."""
        labels = self.labels
        return bool(len(labels) == 0 or labels.min() >= 0)

    @property
    @abstractmethod
    def class_names(self) -> tuple[str, ...]:
        """Names of the classes, indexed by label."""

    @property
    @abstractmethod
    def channels(self) -> int:
        """Channels of the yielded images: 1 (grey) or 3 (RGB)."""

    @abstractmethod
    def fingerprint(self) -> str:
        """sha256 hex digest identifying the content, computed cheaply (index + file sizes, or array hash)."""

    def loader(
        self,
        positions: np.ndarray | None = None,
        *,
        batch_size: int,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        workers: int = 0,
        pin_memory: bool = False,
        image_size: int | None = None,
        drop_last: bool = False,
        shard: tuple[int, int] = (0, 1),
    ) -> DataLoader:
        """A DataLoader over the items at ``positions`` (all when None).

        Yields ``(images uint8 (B, C, H, W), labels int64 (B,), ids int64 (B,))``. Without ``shuffle`` every
        selected item comes exactly once (the order may differ from ``positions`` where a source says so);
        ``shuffle`` is seeded by ``(seed, epoch)``. ``image_size`` resizes every image to (size, size)
        (bilinear, antialiased); None keeps the native size, which all images must share. ``shard = (rank, world)``:
        this rank's part of each batch of ``batch_size`` (distributed training, :class:`BatchIndexSampler`).
        ``workers`` processes decode; ``pin_memory`` pins the batches (CUDA).
        """
        opts = LoaderOptions(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            workers=workers,
            pin_memory=pin_memory,
            image_size=image_size,
            drop_last=drop_last,
            shard=shard,
        )
        return self._loader(self._selection(positions), opts)

    @abstractmethod
    def _loader(self, selection: np.ndarray, opts: LoaderOptions) -> DataLoader:
        """The DataLoader of :meth:`loader` over the checked (K,) int64 positions ``selection``."""

    def resident(
        self, selection: np.ndarray, image_size: int | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``(images uint8 (K, C, S, S), labels (K,), ids (K,))`` of the selected positions when the source holds
        its images in memory already; None (the default) for a source that decodes them (read it through
        :meth:`loader`)."""
        return None

    @functools.cached_property
    def _id_order(self) -> np.ndarray:
        return np.argsort(self.ids, kind="stable")

    def item_positions(self, ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """(K,) int64 positions of ``ids`` (UnknownIdError — a DataError and a KeyError — on an unknown id)."""
        return positions_of_ids(self.ids, self._id_order, np.asarray(ids), f"source {self.name!r}")

    def _selection(self, positions: np.ndarray | None) -> np.ndarray:
        """The selected positions as (K,) int64; DataError when out of range, repeated or not integers."""
        n = len(self)
        if positions is None:
            return np.arange(n, dtype=np.int64)
        pos = np.asarray(positions)
        if pos.ndim != 1 or (pos.size and not np.issubdtype(pos.dtype, np.integer)):
            raise DataError(f"positions must be a 1-D integer array, got {pos.dtype} {pos.shape}")
        pos = pos.astype(np.int64, copy=False)
        if pos.size and (pos.min() < 0 or pos.max() >= n):
            raise DataError(
                f"positions must lie in [0, {n}) for source {self.name!r}; got min {pos.min()}, max {pos.max()} "
                "(use item_positions(ids) to turn ids into positions)"
            )
        if len(np.unique(pos)) != len(pos):
            raise DataError("positions contain duplicates; select every item at most once (np.unique(positions))")
        return pos

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, items={len(self)})"
