"""Exact CMC@k / AP@all counts of a chunk of queries from one value sort per row (docs/design.md §6.2).

The ranking rules are those of :func:`components.evaluation.retrieval.average_precision` (a tie group of
equal scores is one threshold, as scikit-learn's ``average_precision_score``) and of CMC (stable order:
equal scores keep gallery order), but no row is argsorted. Every ranked value is turned into a signed
64-bit *code* whose order is the value order, exactly (a bijection of the float bits; ``-0.0`` and
``+0.0`` are one value), shifted left by one to carry a flag in bit 0: 0 for a relevant gallery item, 1
otherwise. Excluded items (the query itself under leave-one-out) get a code below every valid code. One
``np.sort`` of each row's codes (values only, SIMD, no index array) then puts, within a group of equal
scores, the relevant items first, so for a relevant item whose tie group's first relevant item sits at
position ``p`` of the ascending row and is the ``j``-th relevant item (from 0):

* ``#valid items scoring >= it = Ng - p`` (everything before ``p`` scores lower or is excluded),
  ``#relevant items scoring >= it = m - j``; their ratio is the precision at the end of the tie group
  — the same ratio of two exact integers as in the lexsort implementation — and AP is its mean over the
  query's ``m`` relevant items;
* CMC: the best relevant item (the row's last one) has rank ``Ng - p - 1`` when no other item shares its
  score; rows where one does are re-ranked from their float scores by the stable rule
  ``#(score > best) + #(score == best and gallery position < the best item's)``.

:func:`map_chunks` runs the chunks of an evaluation on a few threads, one matmul per core.

Shapes: ``n`` queries of a chunk, ``b`` of a block of its rows (the elementwise passes then stay in cache),
``Ng`` gallery items, ``M`` (query, relevant item) pairs of a block.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController

__all__ = ["ChunkCounts", "chunk_counts", "label_codes", "map_chunks", "own_columns"]

#: (AP (n_used,) float64 of the queries with a relevant item, in query order; their CMC hits per k).
ChunkCounts = tuple[np.ndarray, dict[int, int]]

_MID = np.int64(0x3FF8000000000000)  # float64 bits of 1.5: centres the distance codes in int64
_EXCLUDED = np.iinfo(np.int64).min | 1  # below every valid code, flag 1 (not relevant)
_LITTLE = sys.byteorder == "little"
#: Threads over query chunks in :func:`map_chunks`: the usable cores, at most 4 (a score buffer each).
_THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
#: Keys (float bits) more than this many ulps apart keep their order through ``distance_of``: with a relative
#: error <= E ulps of acosh(a) <= 710.5 (any float64 a), a gap of D ulps in a gives a true distance gap above
#: 2 (E + 1) ulps of the distance once D > 4 (E + 1) 710.5, i.e. E <= 367 here.
_CLOSE = 1 << 20
#: Rows of one block: its codes (block x Ng x 8 bytes) stay in cache across the elementwise passes.
_BLOCK_BYTES = 1 << 21


def _similarity_codes(scores: np.ndarray, flags: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """Codes (b, Ng) int64 of similarity scores (b, Ng) float64 in [-1, 1], ascending with the score.

    ``2 * |bits|`` with the score's sign is monotone in the float (``-0.0`` and ``+0.0`` both map to 0) and
    stays within +-0x7FE0... for |s| <= 1, so it fits in int64 with bit 0 free for ``flags`` (b, Ng) bool,
    True = not relevant.
    """
    bits = scores.view(np.int64)
    np.left_shift(bits, 1, out=out)  # 2 * magnitude bits (the sign bit falls off)
    np.right_shift(bits, 63, out=tmp)  # -1 where the sign bit is set, else 0
    np.bitwise_xor(out, tmp, out=out)
    np.subtract(out, tmp, out=out)  # negated where negative: two's complement
    np.bitwise_or(out, flags, out=out)


def _distance_codes(dist: np.ndarray, flags: np.ndarray, out: np.ndarray) -> None:
    """Codes (b, Ng) int64 of distances (b, Ng) float64 in [0, inf], ascending with -distance.

    For non-negative floats the bit pattern is monotone, so ``bits(1.5) - bits`` (within +-0x3FF8...)
    descends with the distance and, doubled, fits in int64 with bit 0 free for ``flags``.
    """
    np.subtract(_MID, dist.view(np.int64), out=out)
    np.left_shift(out, 1, out=out)
    np.bitwise_or(out, flags, out=out)


def _stable_ranks(near: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """Rank (n,) of each row's first relevant item in the stable descending order of ``near`` (n, Ng).

    ``near``: float64, higher = nearer, excluded entries already -inf; ``relevant``: (n, Ng) bool,
    relevant and valid, at least one per row. Rank = #(near > best) + #(near == best before it).
    """
    best = np.where(relevant, near, -np.inf).max(axis=1, keepdims=True)
    first = np.argmax(relevant & (near == best), axis=1)  # lowest gallery position among the best
    before = np.arange(near.shape[1])[None, :] < first[:, None]
    return (near > best).sum(axis=1) + ((near == best) & before).sum(axis=1)


def _block_counts(
    codes: np.ndarray,
    n_rel: np.ndarray,
    ks: tuple[int, ...],
    near_rows: Callable[[np.ndarray], np.ndarray],
    relevant_rows: Callable[[np.ndarray], np.ndarray],
) -> ChunkCounts:
    """AP and CMC hits of one block from its row-sorted codes (b, Ng) int64 and relevant counts ``n_rel`` (b,) int64.

    ``near_rows(rows)`` / ``relevant_rows(rows)`` give the float scores (higher = nearer, excluded -inf)
    and the relevant-and-valid mask of the given rows, for re-ranking rows whose best relevant item ties.
    """
    b, ng = codes.shape
    low = codes.view(np.uint8)[:, ::8] if _LITTLE else codes  # bit 0 lives in the lowest byte
    pos = np.flatnonzero((low & 1) == 0)  # (M,) flat positions of the relevant items, row by row, ascending
    if pos.size != int(n_rel.sum()):
        raise RuntimeError("internal error: relevant-item count does not match the ranking codes")
    if pos.size == 0:
        return np.zeros(0), {k: 0 for k in ks}
    flat = codes.reshape(-1)
    rel_codes = flat[pos]  # (M,) 2 * value: flag 0
    ends = np.cumsum(n_rel)
    used = n_rel > 0
    idx = np.arange(pos.size)
    first, first_pos = idx, pos  # index and position of the first relevant item of each one's tie group
    if (rel_codes[1:] == rel_codes[:-1]).any():  # tied relevant items (or a false alarm across rows)
        new_group = np.ones(pos.size, dtype=bool)
        new_group[1:] = rel_codes[1:] != rel_codes[:-1]
        new_group[(ends - n_rel)[used]] = True
        first = np.maximum.accumulate(np.where(new_group, idx, 0))
        first_pos = pos[first]
    row_end = np.repeat(np.arange(1, b + 1) * ng, n_rel)  # (M,) flat position one past the item's row
    # #relevant >= / #valid >= (module docstring): the lexsort path's precision at the end of the tie group
    precision = (np.repeat(ends, n_rel) - first) / (row_end - first_pos)
    ap = np.add.reduceat(precision, (ends - n_rel)[used]) / n_rel[used]

    last = ends[used] - 1  # best relevant item of each used row
    rank = row_end[last] - first_pos[last] - 1
    after = np.minimum(pos[last] + 1, flat.size - 1)
    tied = first[last] != last  # another relevant item with the same score
    tied |= (pos[last] + 1 < row_end[last]) & (flat[after] == rel_codes[last] + 1)  # a non-relevant one
    if tied.any():
        rows = np.flatnonzero(used)[tied]
        rank[tied] = _stable_ranks(near_rows(rows), relevant_rows(rows))
    return ap, {k: int((rank < k).sum()) for k in ks}


def _mark(a: np.ndarray, cols: np.ndarray, value: object) -> np.ndarray:
    """Set ``a[i, cols[i]] = value`` (a: (r, Ng)) for every row whose ``cols[i]`` (r,) is >= 0; returns ``a``."""
    rows = np.flatnonzero(cols >= 0)
    a[rows, cols[rows]] = value
    return a


def _close_rows(codes: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """Rows (r,) of row-sorted codes (b, Ng) with two distinct neighbouring keys at most ``_CLOSE`` ulps apart.

    Codes are 2 * key + flag, so distinct keys 1..T ulps apart differ by 1..2T+1 (a false alarm: equal keys
    of a relevant and a non-relevant item differ by 1, which only costs an exact recomputation).
    """
    diff = np.subtract(codes[:, 1:], codes[:, :-1], out=tmp[:, : codes.shape[1] - 1])  # >= 0, wraps harmlessly
    np.subtract(diff, 1, out=diff)
    return np.flatnonzero((diff.view(np.uint64) <= np.uint64(2 * _CLOSE)).any(axis=1))


def chunk_counts(
    raw: np.ndarray,
    finish: Callable[[np.ndarray], np.ndarray],
    query_labels: np.ndarray,
    gallery_labels: np.ndarray,
    excluded: np.ndarray,
    n_rel: np.ndarray,
    ks: Sequence[int],
    distance_of: Callable[[np.ndarray], np.ndarray] | None = None,
) -> ChunkCounts:
    """Exact CMC hits and per-query AP of one chunk of queries (docs/design.md §6.2); overwrites ``raw``.

    ``raw``: (n, Ng) float64 matmul output; ``finish(block)`` turns a block of its rows, in place, into the
    ranked values, elementwise (so that row blocks give the numbers of the whole chunk):

    * without ``distance_of``: similarity scores in [-1, 1], higher = nearer;
    * with it: a key in [0, inf] from which ``distance_of(keys)`` computes, in place, the exact distance
      (lower = nearer) through a non-decreasing function evaluated with a relative error of at most 367 ulps
      (e.g. acosh, for the Lorentz distance of ``max(1, -K <q, g>_L)``). Rows are ranked by the key; two
      keys more than ``_CLOSE`` ulps apart are provably ordered the same way by their computed distances
      (which cannot tie either), so only rows with two distinct keys closer than that are re-ranked from
      exact distances, where rounding could merge two keys into one distance (a tie).

    ``query_labels`` (n,), ``gallery_labels`` (Ng,): integer class codes; ``excluded`` (n,) int64: the
    gallery column left out for each query, -1 for none; ``n_rel`` (n,) int64: relevant, non-excluded
    gallery items per query. Returns ``(AP of the queries with n_rel > 0, {k: their CMC hits})``.
    """
    n, ng = raw.shape
    ks = tuple(ks)
    block = max(1, min(n, _BLOCK_BYTES // max(8 * ng, 1)))
    codes = np.empty((block, ng), dtype=np.int64)
    tmp = np.empty((block, ng), dtype=np.int64)
    flags = np.empty((block, ng), dtype=bool)
    aps, hits = [], {k: 0 for k in ks}
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        b = r1 - r0
        fl, cd, ex, values = flags[:b], codes[:b], excluded[r0:r1], finish(raw[r0:r1])
        np.not_equal(query_labels[r0:r1, None], gallery_labels[None, :], out=fl)
        if distance_of is None:
            _similarity_codes(values, fl, cd, tmp[:b])
        else:
            _distance_codes(values, fl, cd)
        _mark(cd, ex, _EXCLUDED)
        cd.sort(axis=1)
        if distance_of is not None and ng > 1:
            close = _close_rows(cd, tmp[:b])
            if close.size:  # re-rank these rows from their exact distances
                exact = np.empty((close.size, ng), dtype=np.int64)
                _distance_codes(distance_of(values[close]), fl[close], exact)
                _mark(exact, ex[close], _EXCLUDED)
                exact.sort(axis=1)
                cd[close] = exact

        def near_rows(rows: np.ndarray, ex: np.ndarray = ex, values: np.ndarray = values) -> np.ndarray:
            near = values[rows] if distance_of is None else -distance_of(values[rows])  # fancy indexing copies
            return _mark(near, ex[rows], -np.inf)

        def relevant_rows(rows: np.ndarray, r0: int = r0, ex: np.ndarray = ex) -> np.ndarray:
            return _mark(query_labels[r0 + rows, None] == gallery_labels[None, :], ex[rows], False)

        ap, h = _block_counts(cd, n_rel[r0:r1], ks, near_rows, relevant_rows)
        aps.append(ap)
        for k in ks:
            hits[k] += h[k]
    return np.concatenate(aps) if aps else np.zeros(0), hits


def map_chunks(
    product: Callable[[int, np.ndarray], None],
    rank: Callable[[int, np.ndarray], ChunkCounts],
    nq: int,
    ng: int,
    chunk_size: int,
) -> list[ChunkCounts]:
    """``rank(start, raw)`` of every query chunk, in order, ``raw`` (n, Ng) filled by ``product(start, raw)``.

    Chunks run on up to ``_THREADS`` threads (numpy's sorts and elementwise passes and the matmuls release
    the GIL), each with its own reused score buffer. While they do, BLAS (process-wide, restored after) and
    OpenMP (per thread) run single-threaded: one matmul per core instead of every core spinning on each.
    """
    starts = range(0, nq, chunk_size)
    threads = min(_THREADS, len(starts))
    free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
    for _ in range(threads):  # torch allocates 64-byte aligned memory, the alignment of a fresh matmul output
        free.put(torch.empty(min(chunk_size, nq), ng, dtype=torch.float64).numpy())
    pools = _threadpools() if threads > 1 else None

    def run(start: int) -> ChunkCounts:
        buf = free.get()
        try:
            raw = buf[: min(chunk_size, nq - start)]
            with pools.limit(limits=1, user_api="openmp") if pools else nullcontext():
                product(start, raw)
            return rank(start, raw)
        finally:
            free.put(buf)

    if threads <= 1:
        return [run(start) for start in starts]
    with _single_threaded_blas(pools), ThreadPoolExecutor(threads) as pool:
        return list(pool.map(run, starts))


def _threadpools() -> ThreadpoolController | None:
    """The process's BLAS / OpenMP thread pools (threadpoolctl, installed with scikit-learn), None without it."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - scikit-learn depends on it
        return None
    return ThreadpoolController()


_BLAS_LOCK = threading.Lock()
_blas = {"users": 0, "limiter": None}  # evaluations running, and the limiter the first one set


@contextmanager
def _single_threaded_blas(pools: ThreadpoolController | None) -> Iterator[None]:
    """BLAS limited to one thread while any evaluation runs (reference-counted across threads), then restored."""
    if pools is None:
        yield
        return
    with _BLAS_LOCK:
        if _blas["users"] == 0:
            _blas["limiter"] = pools.limit(limits=1, user_api="blas")
        _blas["users"] += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _blas["users"] -= 1
            if _blas["users"] == 0:
                _blas["limiter"].restore_original_limits()
                _blas["limiter"] = None


def label_codes(query_labels: np.ndarray, gallery_labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer class codes (Nq,), (Ng,) int64 of two label arrays: equal codes exactly where the labels are equal."""
    both = np.concatenate([query_labels, gallery_labels])
    _, codes = np.unique(both, return_inverse=True, equal_nan=False)
    codes = codes.reshape(-1).astype(np.int64)
    return codes[: query_labels.shape[0]], codes[query_labels.shape[0] :]


def own_columns(query_ids: np.ndarray, gallery_ids: np.ndarray) -> np.ndarray:
    """Gallery position (Nq,) int64 of each query's own id (gallery ids unique), -1 where the gallery lacks it."""
    if gallery_ids.shape[0] == 0:
        return np.full(query_ids.shape[0], -1, dtype=np.int64)
    order = np.argsort(gallery_ids, kind="stable")
    at = np.minimum(np.searchsorted(gallery_ids[order], query_ids), gallery_ids.shape[0] - 1)
    return np.where(gallery_ids[order][at] == query_ids, order[at], -1).astype(np.int64)
