"""Choosing an approximate index's search effort from measured recall (docs/design.md §8.3).

With ``target_recall`` set, a build searches the first half of its held-out recall queries
with increasing effort — IVF ``nprobe`` 1, 2, 4, … up to ``nlist``; HNSW ``ef_search``
16 … 512 — and keeps the smallest value whose recall@10 reaches the target (the largest
when none does). The recall the manifest records is then measured on the *other* half,
which the choice never saw, so tuning cannot flatter it. The fewest lists or graph nodes
that meet the target is the fastest search that meets it: the fixed defaults (nprobe 16,
ef_search 96) over-search easy galleries and under-search hard ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["KNOB_GRIDS", "search_knob", "tune"]

#: candidate values per search parameter, cheapest first
KNOB_GRIDS: dict[str, tuple[int, ...]] = {
    "nprobe": (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256),
    "ef_search": (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512),
}


def search_knob(params: dict[str, Any]) -> tuple[str, list[int]] | None:
    """The search parameter of an index's manifest ``params`` and its candidate values (None: flat, nothing to tune)."""
    if "nprobe" in params:
        return "nprobe", [v for v in KNOB_GRIDS["nprobe"] if v <= int(params["nlist"])] or [1]
    if "ef_search" in params:
        return "ef_search", list(KNOB_GRIDS["ef_search"])
    return None


def tune(
    params: dict[str, Any], target: float, recall_with: Callable[[dict[str, Any]], float | None]
) -> dict[str, Any]:
    """``params`` with the cheapest value of its search knob whose ``recall_with(params)`` reaches ``target``.

    ``recall_with`` applies the candidate params to the index and returns recall@10 on the tuning queries (None when
    no query has a neighbour: nothing to tune). The result records ``tuned_for`` (the target) and ``tuning_recall``.
    """
    knob = search_knob(params)
    if knob is None:
        return params
    name, grid = knob
    chosen, recall = dict(params), None
    for value in grid:  # cheapest first: stop at the first value that reaches the target
        chosen = {**params, name: value}
        recall = recall_with(chosen)
        if recall is None or recall >= target:
            break
    return {**chosen, "tuned_for": float(target), "tuning_recall": recall}
