"""Exact CMC@k / AP@all counts of a chunk of queries from one value sort per row (docs/design.md §6.2).

The ranking rules are those of :func:`components.evaluation.retrieval.average_precision` (a tie group of
equal scores is one threshold, as scikit-learn's ``average_precision_score``) and of CMC (stable order:
equal scores keep gallery order), but no row is argsorted. Every ranked value is turned into an unsigned
64-bit *code* whose order is the value order, exactly (a bijection of the float bits; ``-0.0`` and
``+0.0`` are one value), shifted left by one to carry a flag in bit 0: 0 for a relevant gallery item, 1
otherwise. Excluded items (the query itself under leave-one-out) get code 1, below every valid code. One
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

Shapes: ``n`` queries of a chunk, ``b`` of a block of its rows (the elementwise passes then stay in cache),
``Ng`` gallery items, ``M`` (query, relevant item) pairs of a block.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["ChunkCounts", "chunk_counts", "label_codes", "own_columns"]

#: (AP (n_used,) float64 of the queries with a relevant item, in query order; their CMC hits per k).
ChunkCounts = tuple[np.ndarray, dict[int, int]]

_SIGN = np.int64(-(2**63))  # bit 63
_INF_PLUS_ONE = np.int64(0x7FF0000000000001)  # float64 +inf bits + 1
_EXCLUDED = np.uint64(1)  # value 0 (below every valid code), flag 1 (not relevant)
_LITTLE = sys.byteorder == "little"
#: Rows of one block: its codes (block x Ng x 8 bytes) stay in cache across the elementwise passes.
_BLOCK_BYTES = 1 << 21


def _similarity_codes(scores: np.ndarray, flags: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """Codes (b, Ng) uint64 of similarity scores (b, Ng) float64 in [-1, 1], ascending with the score.

    ``2 * |bits|`` with the sign applied is monotone in the float (``-0.0`` and ``+0.0`` both map to
    0) and stays within +-0x7FE0... for |s| <= 1, so it fits in int64 with bit 0 free; flipping bit 63
    turns signed order into unsigned order. ``flags`` (b, Ng) bool: True = not relevant.
    """
    bits = scores.view(np.int64)
    o = out.view(np.int64)
    np.left_shift(bits, 1, out=o)  # 2 * magnitude bits (the sign bit falls off)
    np.right_shift(bits, 63, out=tmp)  # -1 where the sign bit is set, else 0
    np.bitwise_xor(o, tmp, out=o)
    np.subtract(o, tmp, out=o)  # negated where negative: two's complement
    np.bitwise_xor(o, _SIGN, out=o)
    np.bitwise_or(out, flags, out=out)


def _distance_codes(dist: np.ndarray, flags: np.ndarray, out: np.ndarray) -> None:
    """Codes (b, Ng) uint64 of distances (b, Ng) float64 in [0, inf], ascending with -distance.

    For non-negative floats the bit pattern is monotone, so ``inf_bits + 1 - bits`` (in [1, inf_bits + 1])
    descends with the distance and, doubled, fits in uint64 with bit 0 free.
    """
    o = out.view(np.int64)
    np.subtract(_INF_PLUS_ONE, dist.view(np.int64), out=o)
    np.left_shift(o, 1, out=o)
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
    """Counts of one block from its row-sorted codes (b, Ng) and relevant counts ``n_rel`` (b,) int64.

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
    first = idx  # index of the first relevant item of each one's tie group
    if (rel_codes[1:] == rel_codes[:-1]).any():  # tied relevant items (or a false alarm across rows)
        new_group = np.ones(pos.size, dtype=bool)
        new_group[1:] = rel_codes[1:] != rel_codes[:-1]
        new_group[(ends - n_rel)[used]] = True
        first = np.maximum.accumulate(np.where(new_group, idx, 0))
    row_end = np.repeat(np.arange(1, b + 1) * ng, n_rel)  # (M,) flat position one past the item's row
    # #relevant >= / #valid >= (module docstring): the lexsort path's precision at the end of the tie group
    precision = (np.repeat(ends, n_rel) - first) / (row_end - pos[first])
    ap = np.add.reduceat(precision, (ends - n_rel)[used]) / n_rel[used]

    last = ends[used] - 1  # best relevant item of each used row
    rank = row_end[last] - pos[first[last]] - 1
    after = np.minimum(pos[last] + 1, flat.size - 1)
    tied = first[last] != last  # another relevant item with the same score
    tied |= (pos[last] + 1 < row_end[last]) & (flat[after] == rel_codes[last] + np.uint64(1))  # a non-relevant one
    if tied.any():
        rows = np.flatnonzero(used)[tied]
        rank[tied] = _stable_ranks(near_rows(rows), relevant_rows(rows))
    return ap, {k: int((rank < k).sum()) for k in ks}


def chunk_counts(
    raw: np.ndarray,
    finish: Callable[[np.ndarray], np.ndarray],
    distance: bool,
    query_labels: np.ndarray,
    gallery_labels: np.ndarray,
    excluded: np.ndarray,
    n_rel: np.ndarray,
    ks: Sequence[int],
) -> ChunkCounts:
    """Exact CMC hits and AP sum of one chunk of queries (docs/design.md §6.2); overwrites ``raw``.

    ``raw``: (n, Ng) float64 matmul output; ``finish(block)`` turns a block of its rows, in place, into the
    ranked values: similarities in [-1, 1], higher = nearer, or when ``distance`` distances in [0, inf],
    lower = nearer. It must be elementwise, so that blocks of rows give the numbers the whole
    chunk would. ``query_labels`` (n,), ``gallery_labels`` (Ng,): integer class codes; ``excluded`` (n,)
    int64: the gallery column left out for each query, -1 for none; ``n_rel`` (n,) int64: relevant,
    non-excluded gallery items per query. Returns ``(AP of the queries with n_rel > 0, {k: their CMC hits})``.
    """
    n, ng = raw.shape
    ks = tuple(ks)
    block = max(1, min(n, _BLOCK_BYTES // max(8 * ng, 1)))
    codes = np.empty((block, ng), dtype=np.uint64)
    tmp = np.empty((block, ng), dtype=np.int64)
    flags = np.empty((block, ng), dtype=bool)
    aps, hits = [], {k: 0 for k in ks}
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        b = r1 - r0
        fl, cd, values = flags[:b], codes[:b], finish(raw[r0:r1])
        np.not_equal(query_labels[r0:r1, None], gallery_labels[None, :], out=fl)
        if distance:
            _distance_codes(values, fl, cd)
        else:
            _similarity_codes(values, fl, cd, tmp[:b])
        ex_rows = np.flatnonzero(excluded[r0:r1] >= 0)
        cd[ex_rows, excluded[r0:r1][ex_rows]] = _EXCLUDED
        cd.sort(axis=1)

        def near_rows(rows: np.ndarray, r0: int = r0, values: np.ndarray = values) -> np.ndarray:
            near = -values[rows] if distance else values[rows]  # fancy indexing copies
            hit = excluded[r0 + rows] >= 0
            near[np.flatnonzero(hit), excluded[r0 + rows][hit]] = -np.inf
            return near

        def relevant_rows(rows: np.ndarray, r0: int = r0) -> np.ndarray:
            rel = query_labels[r0 + rows, None] == gallery_labels[None, :]
            hit = excluded[r0 + rows] >= 0
            rel[np.flatnonzero(hit), excluded[r0 + rows][hit]] = False
            return rel

        ap, h = _block_counts(cd, n_rel[r0:r1], ks, near_rows, relevant_rows)
        aps.append(ap)
        for k in ks:
            hits[k] += h[k]
    return np.concatenate(aps) if aps else np.zeros(0), hits


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
