"""A chain of bridges: g2's queries → g1 → g0 (BC-Aligner, KDD'22, chains light maps across generations).

Each link is a :class:`~components.bridges.base.Bridge` whose source is the previous link's target; the chain maps
fitting-space vectors through every link in turn and lands on the last target's manifold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.bridges.base import Bridge
from components.errors import ConfigError
from components.indexing.gallery import GalleryEmbeddings

__all__ = ["BridgeChain"]


@dataclass(frozen=True)
class BridgeChain:
    """``links`` in order: links[0].source is the chain's source, links[-1].target its target."""

    links: tuple[Bridge, ...]

    def __post_init__(self) -> None:
        if not self.links:
            raise ConfigError("a bridge chain needs at least one bridge")
        for a, b in zip(self.links, self.links[1:]):
            if a.target != b.source or a.target_width != b.source_width:
                raise ConfigError(
                    f"{a} cannot feed {b}: it ends in generation {a.target} ({a.target_width} wide), the next starts "
                    f"in generation {b.source} ({b.source_width} wide); chain bridges of consecutive generations"
                )

    @property
    def source(self) -> int:
        return self.links[0].source

    @property
    def target(self) -> int:
        return self.links[-1].target

    @property
    def generations(self) -> list[int]:
        """Every generation the chain passes through, source first: [2, 1, 0]."""
        return [self.links[0].source, *(b.target for b in self.links)]

    def __str__(self) -> str:
        return " → ".join(f"g{g}" for g in self.generations) + f" ({', '.join(b.kind for b in self.links)})"

    def map_vectors(self, x: np.ndarray) -> np.ndarray:
        """(N, source width) fitting-space vectors of the source → (N, target width) of the target."""
        for b in self.links:
            x = b.map_vectors(x)
        return x

    def map_queries(self, vectors: np.ndarray) -> np.ndarray:
        """(N, D_s) retrieval vectors of the source as its model serves them (Lorentz: hyperboloid points, time
        first; Euclidean: unit vectors) → (N, D_t) retrieval vectors on the target's manifold, float64: what
        searches the target's gallery (a query service's adapter). Tangent space at the origin in between (HBCT
        Eqs. (5)–(6))."""
        z = self.map_vectors(self.links[0].source_space.to_tangent(vectors))
        return self.links[-1].target_space.from_tangent(z)

    def map_gallery(self, g: GalleryEmbeddings) -> GalleryEmbeddings:
        """``g`` (embedded by the chain's source) carried through every link onto the target's manifold."""
        for b in self.links[:-1]:
            g = b.map_gallery(g)
        return self.links[-1].map_gallery(g)
