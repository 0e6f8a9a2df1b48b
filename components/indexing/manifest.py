"""What every gallery store's attachment says of one gallery version's vectors (docs/design.md §8.4).

A gallery version's index folder holds ``manifest.json`` (:data:`ATTACHMENT`), the file the lineage pins: the FAISS
files store's index manifest, or a database store's record of the collection that holds the vectors. Both are a
:class:`GalleryManifest`: the fields the flows read of any store's index — its generation, the space of its points,
their width and count, the index type and its parameters, the query generations it accepts and the build record —
which each store's manifest extends with its own (the FAISS files' checksums and factory string, a database's URI,
collection and rows per generation stamp).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from components.geometry import Space, create_space

__all__ = ["ATTACHMENT", "GalleryManifest", "read_attachment"]

#: the file in a version's index folder that names its searchable vectors (FAISS: the index manifest itself)
ATTACHMENT = "manifest.json"


@dataclass(frozen=True, kw_only=True)
class GalleryManifest:
    """One gallery version's index as every store records it.

    ``generation``: the generation whose gallery it is; ``geometry`` / ``curvature``: the space of its points;
    ``dim``: their width (d for euclidean, d+1 for lorentz, time first); ``count``: the rows it holds;
    ``index_type`` and ``params``: the index built, in its store's terms; ``compatible_generations``: the query
    generations allowed to search it; ``recall_at_10`` (on ``recall_queries`` gallery items, against exact search),
    ``build_seconds`` and ``search_qps``: the build record (None: not measured)."""

    generation: int
    geometry: str
    curvature: float
    dim: int
    count: int
    index_type: str
    params: dict[str, Any] = field(default_factory=dict)
    compatible_generations: tuple[int, ...] = ()
    recall_at_10: float | None = None
    recall_queries: int = 0
    build_seconds: float | None = None
    search_qps: float | None = None

    @property
    def space(self) -> Space:
        """The space of the indexed points, made from the stored ``geometry`` and ``curvature``."""
        return create_space(self.geometry, self.curvature)

    def with_compatible(self, generations: tuple[int, ...] | list[int]) -> Self:
        """This manifest accepting queries of ``generations`` (a pointer's compatible generations)."""
        return replace(self, compatible_generations=tuple(int(g) for g in generations))


def read_attachment(out: Path) -> dict[str, Any] | None:
    """The JSON object of ``out``'s attachment, read without checking it; None where it is missing or damaged (the
    store's own open reports which)."""
    try:
        body = json.loads((Path(out) / ATTACHMENT).read_bytes())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None
