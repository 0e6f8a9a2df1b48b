"""Exact CMC@k / AP@all counts of a chunk of queries from one value sort per row (docs/design.md §6.2).

The ranking rules are those of :func:`components.evaluation.retrieval.average_precision` (a tie group of
equal scores is one threshold, as scikit-learn's ``average_precision_score``) and of CMC (stable order:
equal scores keep gallery order), but no row is argsorted. Every score is turned into an unsigned 64-bit
*code* whose order is the score order, exactly (a bijection of the float bits, ``-0.0`` and ``+0.0``
merged), shifted left by one to carry a flag in bit 0: 0 for a relevant gallery item, 1 otherwise.
Excluded items (the query itself under leave-one-out) get code 1, below every valid code. One
``np.sort`` of each row's codes (values only, SIMD, no index array) then gives:

* ``j``: the rank of a relevant item among the row's relevant items in ascending score, ``p`` its
  position in the sorted row, and ``c = p - j`` the number of other items (non-relevant or excluded)
  sorting before it. Within a group of equal scores the relevant items come first (flag 0 < 1), so
  ``c`` counts exactly the non-relevant items with a *lower* score.
* For the first relevant item ``j'`` of its tie group: ``#relevant >= score = m - j'`` and
  ``#valid >= score = Ng - j' - c``, hence AP = mean over relevant items of ``(m - j') / (Ng - j' - c)``,
  the same integer ratio (precision at the end of the tie group) as the lexsort implementation.
* CMC: the best relevant item has rank ``#valid >= best - 1`` when its score is unique in the row; rows
  where it ties with another item are re-ranked from their float scores by the stable rule
  (``#(score > best) + #(score == best and gallery position < its position)``).

Shapes: ``n`` queries of the chunk, ``Ng`` gallery items; ``M`` = number of (query, relevant item) pairs
of a block of rows.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

__all__ = ["ChunkCounts", "chunk_counts"]

#: (queries with a relevant item, their AP sum, CMC hits per k) of one chunk.
ChunkCounts = tuple[int, float, dict[int, int]]

_SIGN = np.int64(-(2**63))  # bit 63
_INF_PLUS_ONE = np.int64(0x7FF0000000000001)  # float64 +inf bits + 1
_EXCLUDED = np.uint64(1)  # value 0 (below every valid code), flag 1 (not relevant)
_LITTLE = sys.byteorder == "little"
#: Rows of one block: its codes (block x Ng x 8 bytes) stay in cache across the elementwise passes.
_BLOCK_BYTES = 1 << 21


def _cosine_codes(scores: np.ndarray, flags: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """Codes (b, Ng) uint64 of cosine scores (b, Ng) float64 in [-1, 1], ascending with the score.

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


def _lorentz_codes(arg: np.ndarray, flags: np.ndarray, out: np.ndarray) -> None:
    """Codes (b, Ng) uint64 of ``arg = max(1, -K <q, g>_L)`` (b, Ng) float64, ascending with -arg.

    For positive floats the bit pattern is monotone, so ``inf_bits + 1 - bits`` (in [1, 2^62 + 1] for
    arg in [1, inf]) descends with arg and, doubled, fits in uint64 with bit 0 free.
    """
    o = out.view(np.int64)
    np.subtract(_INF_PLUS_ONE, arg.view(np.int64), out=o)
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
    codes: np.ndarray, n_rel: np.ndarray, ks: tuple[int, ...], near_rows, relevant_rows
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
        return 0, 0.0, {k: 0 for k in ks}
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
    # Everything from the tie group's first relevant item on scores >= it (equal non-relevant items sort after
    # the relevant ones, excluded items first), everything before it lower: precision at the group's end is
    # #relevant >= / #valid >= , the same ratio of exact integers as the lexsort path.
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
    return int(used.sum()), float(ap.sum()), {k: int((rank < k).sum()) for k in ks}


def chunk_counts(
    values: np.ndarray,
    lorentz: bool,
    query_labels: np.ndarray,
    gallery_labels: np.ndarray,
    excluded: np.ndarray,
    n_rel: np.ndarray,
    ks: Sequence[int],
) -> ChunkCounts:
    """Exact CMC hits and AP sum of one chunk of queries (docs/design.md §6.2).

    ``values``: (n, Ng) float64; cosine scores in [-1, 1] (higher = nearer) or, when ``lorentz``, the
    arccosh argument ``max(1, -K <q, g>_L)`` (lower = nearer: the geodesic distance is monotone in it).
    ``query_labels`` (n,), ``gallery_labels`` (Ng,): integer class codes; ``excluded`` (n,) int64: the
    gallery column left out for each query, -1 for none; ``n_rel`` (n,) int64: relevant, non-excluded
    gallery items per query. Returns ``(queries with n_rel > 0, their AP sum, {k: CMC hits})``.
    """
    n, ng = values.shape
    ks = tuple(ks)
    block = max(1, min(n, _BLOCK_BYTES // max(8 * ng, 1)))
    codes = np.empty((block, ng), dtype=np.uint64)
    tmp = np.empty((block, ng), dtype=np.int64)
    flags = np.empty((block, ng), dtype=bool)
    used, ap_sum, hits = 0, 0.0, {k: 0 for k in ks}
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        b = r1 - r0
        fl, cd = flags[:b], codes[:b]
        np.not_equal(query_labels[r0:r1, None], gallery_labels[None, :], out=fl)
        if lorentz:
            _lorentz_codes(values[r0:r1], fl, cd)
        else:
            _cosine_codes(values[r0:r1], fl, cd, tmp[:b])
        ex_rows = np.flatnonzero(excluded[r0:r1] >= 0)
        ex_cols = excluded[r0:r1][ex_rows]
        cd[ex_rows, ex_cols] = _EXCLUDED
        cd.sort(axis=1)

        def near_rows(rows: np.ndarray, r0: int = r0) -> np.ndarray:
            v = values[r0 + rows]
            near = -v if lorentz else v.copy()  # -arg orders as -distance
            hit = excluded[r0 + rows] >= 0
            near[np.flatnonzero(hit), excluded[r0 + rows][hit]] = -np.inf
            return near

        def relevant_rows(rows: np.ndarray, r0: int = r0) -> np.ndarray:
            rel = query_labels[r0 + rows, None] == gallery_labels[None, :]
            hit = excluded[r0 + rows] >= 0
            rel[np.flatnonzero(hit), excluded[r0 + rows][hit]] = False
            return rel

        u, a, h = _block_counts(cd, n_rel[r0:r1], ks, near_rows, relevant_rows)
        used += u
        ap_sum += a
        for k in ks:
            hits[k] += h[k]
    return used, ap_sum, hits
