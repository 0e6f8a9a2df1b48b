"""The geometry seam: a :class:`Space` is everything the rest of the code asks of a geometry (docs/design.md §2.6).

A model, a gallery, an index, a store, a bridge and a metric are handed a space — as pytorch-metric-learning hands
its losses a distance object — and never compare geometry names. What travels between them is one vector form,
the space's *points* (``(N, D)`` rows: unit vectors, or hyperboloid points with the time coordinate first); every
conversion from or to it happens inside the space:

* features → points (:meth:`Space.points`), and the tangent space the bridges fit in (:meth:`Space.tangent`,
  :meth:`Space.to_tangent`, :meth:`Space.from_tangent`);
* points checked (:meth:`Space.checked`, :meth:`Space.on_space`);
* the query form whose dot product with a stored row is the similarity (:meth:`Space.query_form`);
* the exact float64 similarity scores: all pairs (:meth:`Space.scores`), in query chunks for the ranking
  (:meth:`Space.score_kernels`) and of re-scored candidates (:meth:`Space.candidate_scores`).

Stored names do not change: params.yaml, checkpoints, manifests, the lineage and MLflow keep the strings
(``"lorentz"`` / ``"euclidean"``), and the space is made from the string where it is read: :func:`create_space`.
A space is one module of :mod:`components.geometry.spaces` registered with :func:`register_space`.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, TypeVar

import numpy as np
from torch import Tensor

from components.errors import ConfigError
from components.plugins import Catalog

__all__ = [
    "SPACES",
    "Rows",
    "ScoreKernels",
    "Space",
    "as_matrix",
    "create_space",
    "list_spaces",
    "register_space",
    "unit_rows",
]

#: ``(product, finish, distance_of)`` of :func:`components.evaluation.ranking.chunk_counts`: ``product(start, out)``
#: writes the raw scores of queries ``start : start + len(out)`` into ``out`` (n, Ng); ``finish(block)`` turns a block
#: of them, in place, into the ranked values; ``distance_of`` (or None) the exact distance of a ranked key.
ScoreKernels = tuple[
    Callable[[int, np.ndarray], None],
    Callable[[np.ndarray], np.ndarray],
    Callable[[np.ndarray], np.ndarray] | None,
]

Rows = TypeVar("Rows", np.ndarray, Tensor)


def as_matrix(name: str, x: np.ndarray) -> np.ndarray:
    """An embedding matrix ``x`` checked (2-D, finite) and returned as float64 (N, D); ValueError naming ``name``."""
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array (N, D), got shape {a.shape}; "
            "stack the embeddings into one matrix, one row per item"
        )
    a = a.astype(np.float64, copy=False)
    if not np.isfinite(a).all():
        raise ValueError(
            f"{name} contains NaN or inf values; fix the embedding model (or drop the broken rows) before evaluating"
        )
    return a


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` (N, d) divided by their norms (all-zero rows stay zero), in ``x``'s float dtype."""
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.finfo(x.dtype).tiny)


class Space(ABC):
    """A geometry at curvature −K (K = ``curvature``, > 0; a flat space keeps the K it was named with, for the
    record). Subclasses register with :func:`register_space` and answer every question below for their points."""

    name: ClassVar[str] = ""
    #: coordinates a point has beyond its feature width d (the Lorentz time coordinate)
    extra_width: ClassVar[int] = 0
    #: whether a point's distance from the origin encodes the model's confidence: its tangent radius is clipped at
    #: ζ, an item has an uncertainty (HBCT Eq. (10)), entailment cones apply, a full backfill may restart ζ
    radius_encodes_confidence: ClassVar[bool] = False
    #: whether ``query_form(q) · row`` is an indefinite product (⟨q, g⟩_L): approximate indexes cannot search it by
    #: inner product and search an L2 form of the rows instead, re-ranked exactly (docs/design.md §8.3)
    indefinite: ClassVar[bool] = False
    #: what a point of the space is, for messages that say how to fix rows that are not
    point_words: ClassVar[str] = "points of the space"

    def __init__(self, curvature: float = 1.0) -> None:
        k = curvature
        if isinstance(k, bool) or not isinstance(k, numbers.Real) or not (math.isfinite(k) and k > 0):
            raise ConfigError(
                f"curvature must be a finite number > 0 (the space has curvature -K), got {curvature!r}; "
                "pass the K the embeddings were lifted with"
            )
        self._curvature = float(k)

    @property
    def curvature(self) -> float:
        """K of the space's curvature −K."""
        return self._curvature

    def at(self, curvature: float) -> Space:
        """The same geometry at curvature −``curvature`` (a query lifted onto an older gallery's hyperboloid)."""
        return type(self)(curvature)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and (self.name, self.curvature) == (other.name, other.curvature)

    def __hash__(self) -> int:
        return hash((self.name, self.curvature))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(curvature={self.curvature:g})"

    # ------------------------------------------------------------------ widths
    def point_width(self, dim: int) -> int:
        """Width D of a point for features of width ``dim`` (d, or d+1 with a time coordinate)."""
        return dim + self.extra_width

    @property
    def min_width(self) -> int:
        """The narrowest point the space has (one feature dimension)."""
        return self.point_width(1)

    @property
    @abstractmethod
    def label(self) -> str:
        """A short label for tables (``E``, ``L K=1``)."""

    # --------------------------------------------------------------- vector forms
    @abstractmethod
    def points(self, z: Rows, emb: Rows) -> Rows:
        """A model's features → its points: the tangent vectors ``z`` (B, d) and the head's embedding ``emb``
        (B, D) in, points (B, D) out. numpy in: float64 numpy out; tensors in: tensors of their dtype."""

    @abstractmethod
    def tangent(self, z: np.ndarray, emb: np.ndarray) -> np.ndarray:
        """A model's features (as :meth:`points` takes them) → (N, d) float64 vectors of the bridges' fitting
        space (docs/design.md §11)."""

    @abstractmethod
    def to_tangent(self, points: np.ndarray) -> np.ndarray:
        """Points (N, D) → (N, d) float64 fitting-space vectors: what :meth:`tangent` gives for served rows."""

    @abstractmethod
    def from_tangent(self, v: np.ndarray) -> np.ndarray:
        """(N, d) fitting-space vectors → (N, D) float64 points (the inverse of :meth:`to_tangent`)."""

    @abstractmethod
    def checked(self, x: np.ndarray, *, error: type[Exception], what: str, fix: str) -> np.ndarray:
        """(N, D) float64 rows as an index of this space holds them, or ``error`` naming ``what`` and the ``fix``
        for rows that are not points of the space."""

    @abstractmethod
    def on_space(self, rows: np.ndarray) -> np.ndarray:
        """bool (N,): which stored float32 rows (N, D) are points of this space within float32 rounding."""

    @abstractmethod
    def query_form(self, points: np.ndarray) -> np.ndarray:
        """Points (N, D) → rows whose dot product with a stored point is the similarity (a copy where it differs)."""

    def restore_decoded(self, rows: np.ndarray) -> np.ndarray:
        """Rows (…, D) decoded from approximate codes (IVF-PQ), in place, put back on the space where the codes
        lose a constraint the scores need. Default: unchanged."""
        return rows

    # ------------------------------------------------------------------ scores
    def scores(self, queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
        """All query × gallery similarity scores, float64 (Nq, Ng), higher = nearer (docs/design.md §6).

        ``queries`` (Nq, D), ``gallery`` (Ng, D): points, checked by :meth:`checked_pair`."""
        return self._scores(*self.checked_pair(queries, gallery))

    def checked_pair(self, queries: np.ndarray, gallery: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``queries`` (Nq, D) and ``gallery`` (Ng, D) as float64, checked: 2-D, finite, of one width the space
        allows (ValueError saying which and how to fix it)."""
        q = as_matrix("queries", queries)
        g = as_matrix("gallery", gallery)
        if q.shape[1] != g.shape[1]:
            raise ValueError(
                f"queries have width {q.shape[1]} but gallery has width {g.shape[1]}; "
                "embed both with models of the same output dimension and geometry"
            )
        if q.shape[1] < self.min_width:
            raise ValueError(
                f"{self.name} embeddings need width >= {self.min_width} ({self.point_words}); "
                "pass points of the space, not tangent vectors"
            )
        return q, g

    @abstractmethod
    def _scores(self, q: np.ndarray, g: np.ndarray) -> np.ndarray:
        """:meth:`scores` of checked float64 points."""

    @abstractmethod
    def score_kernels(self, q_all: np.ndarray, g_all: np.ndarray) -> ScoreKernels:
        """:data:`ScoreKernels` of checked float64 points: the chunks of an evaluation scored with the float
        operations of :meth:`scores` (a query chunk there is a chunk here)."""

    @abstractmethod
    def candidate_scores(self, q: np.ndarray, g: np.ndarray) -> np.ndarray:
        """float64 scores (n, k) of queries ``q`` (n, D) in :meth:`query_form` against candidate points ``g``
        (n, k, D) float64 (zero rows where a candidate is missing: their scores are to be masked)."""

    def uncertainty(self, z: np.ndarray) -> np.ndarray | None:
        """Per-item uncertainty (N,) float64 of tangent vectors ``z`` (N, d); None where the radius encodes none."""
        return None


SPACES: Catalog[type[Space]] = Catalog(
    "geometry", "components.geometry.spaces", ConfigError, "set model.geometry in params.yaml", name_attr="name"
)

#: the catalog's face (components/plugins.py): ``@register_space("name")`` on a Space subclass (its ``name``: the
#: string params and files store), ``list_spaces()``, ``create_space(name, curvature=1.0)`` (the space at curvature −K)
register_space, list_spaces, create_space = SPACES.register, SPACES.names, SPACES.create
