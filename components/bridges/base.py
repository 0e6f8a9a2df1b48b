"""A bridge between two generations' embedding spaces: a fitted map, its file and its checks (docs/design.md §11).

A *bridge* carries vectors of generation ``source`` into the space of generation ``target`` — a query adapter maps a
new model's queries into its parent's gallery space (Drift-Adapter, EMNLP'25); a gallery transform maps stored old
vectors into the new space (FCT, CVPR'22). Both are the same object, fitted on a paired sample (the same items
embedded by both generations).

Geometry. A map is fitted in each side's *fitting space*, which its space says (:meth:`Space.tangent
<components.geometry.space.Space.tangent>`): the tangent space at the origin for a Lorentz gallery (the stored ``z``,
(N, D): HBCT Eq. (6) ``logmap0`` of the hyperboloid points, whose norms carry the uncertainty) and the unit sphere's
ambient coordinates for a Euclidean one ((N, D) unit vectors). The mapped vectors go back onto the target's manifold
(:meth:`Space.from_tangent <components.geometry.space.Space.from_tangent>`): ``expmap0`` onto the target's
K-hyperboloid (HBCT Eq. (5)), or normalised to unit length.

A map kind is one module of :mod:`components.bridges.maps` registered in :data:`MAPS` (timm-style:
``register_map``, ``create_map(kind, **options)``, ``list_maps()``, ``check_map_options(kind, options)``): orthogonal
Procrustes, low-rank affine, residual MLP. Its parameters are numpy arrays; applying it is numpy only (a few
matrix products per batch), so a query adapter adds microseconds, not a model forward pass.
"""

from __future__ import annotations

import io
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from components.errors import ConfigError, IndexIntegrityError
from components.geometry import Space, create_space
from components.indexing.gallery import GalleryEmbeddings, read_npz
from components.io import atomic_write_bytes, file_sha256
from components.plugins import Catalog

__all__ = [
    "MAPS",
    "Bridge",
    "BridgeMap",
    "check_map_options",
    "create_map",
    "fitting_space",
    "list_maps",
    "min_pairs",
    "register_map",
    "relative_error",
    "us_per_query",
]


def min_pairs(width: int) -> int:
    """The fewest paired items a map of ``width``-wide source vectors is fitted on: two per dimension, at least 16."""
    return 2 * max(width, 8)


class BridgeMap(ABC):
    """A map from (N, d_in) source fitting-space vectors to (N, d_out) target ones. Subclasses keep their
    parameters as numpy arrays (:meth:`arrays` / :meth:`from_arrays`) and apply them with numpy."""

    kind: ClassVar[str] = ""

    @abstractmethod
    def fit(self, x: np.ndarray, y: np.ndarray, seed: int = 0) -> BridgeMap:
        """Fit on paired rows: ``x`` (N, d_in) float64, ``y`` (N, d_out) float64. Returns self."""

    @abstractmethod
    def apply(self, x: np.ndarray) -> np.ndarray:
        """(N, d_in) → (N, d_out), float64."""

    @abstractmethod
    def arrays(self) -> dict[str, np.ndarray]:
        """The fitted parameters, by name (saved in the bridge's file)."""

    @classmethod
    @abstractmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> BridgeMap:
        """The map with these fitted parameters."""


MAPS: Catalog[type[BridgeMap]] = Catalog(
    "bridge map",
    "components.bridges.maps",
    ConfigError,
    "set upgrade.map in params.yaml",
    name_attr="kind",
    bad_options="the {name} map has no option {unknown_each} (its options: {known_each}); fix upgrade.map_options",
)

#: the catalog's face (components/plugins.py): ``@register_map("name")`` on a BridgeMap subclass (its ``kind``),
#: ``list_maps()``, ``create_map(kind, **options)`` (an unfitted map) and ``check_map_options(kind, options)``
register_map, list_maps, create_map, check_map_options = MAPS.register, MAPS.names, MAPS.create, MAPS.check_options


def fitting_space(g: GalleryEmbeddings) -> np.ndarray:
    """(N, D) float64: the gallery's embeddings in its space's fitting space (:meth:`Space.tangent
    <components.geometry.space.Space.tangent>`: the tangent vectors at the origin (Lorentz) or the unit vectors
    (Euclidean))."""
    if g.features != "embedding":
        raise ConfigError(f"a bridge maps embeddings, not {g.features} features; set evaluation features: embedding")
    return g.space.tangent(g.z, g.emb)


def us_per_query(apply: Callable[[np.ndarray], Any], queries: np.ndarray, batch: int = 1024, repeats: int = 5) -> float:
    """Microseconds per query of ``apply`` over a batch of ``batch`` rows of ``queries`` ((N, D), repeated to fill
    it), the best of ``repeats`` runs (a shared machine's noise only ever adds time)."""
    x = np.ascontiguousarray(np.resize(np.asarray(queries, dtype=np.float64), (batch, queries.shape[1])))
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        apply(x)
        best = min(best, time.perf_counter() - t0)
    return best / batch * 1e6


def relative_error(mapped: np.ndarray, target: np.ndarray) -> float:
    """‖mapped − target‖_F / ‖target‖_F: 0 for a perfect map, 1 for the zero map."""
    return float(np.linalg.norm(mapped - target) / max(np.linalg.norm(target), 1e-300))


@dataclass(frozen=True)
class Bridge:
    """A fitted map from generation ``source`` to generation ``target`` with both sides' geometry, curvature and
    fitting-space width, the paired ``sample`` it was fitted on and its held-out ``fit_error``
    (:func:`relative_error` on pairs left out of the fit)."""

    source: int
    target: int
    map: BridgeMap
    geometry: str
    source_curvature: float
    target_curvature: float
    source_width: int
    target_width: int
    sample: int
    fit_error: float

    @property
    def kind(self) -> str:
        return self.map.kind

    def __str__(self) -> str:
        return f"{self.kind} bridge g{self.source}→g{self.target}"

    @property
    def source_space(self) -> Space:
        """The source generation's space (the stored ``geometry`` at ``source_curvature``)."""
        return create_space(self.geometry, self.source_curvature)

    @property
    def target_space(self) -> Space:
        """The target generation's space (the stored ``geometry`` at ``target_curvature``)."""
        return create_space(self.geometry, self.target_curvature)

    @classmethod
    def fit(
        cls, kind: str, source: int, target: int, x: GalleryEmbeddings, y: GalleryEmbeddings, seed: int = 0, **opts: Any
    ) -> Bridge:
        """Fit a ``kind`` map (options ``opts``) from ``x`` (the paired items embedded by generation ``source``) to
        ``y`` (the same items, in the same order, embedded by ``target``). The held-out error is measured on a fifth
        of the pairs left out of a first fit; the bridge is then fitted on every pair."""
        check_map_options(kind, opts)  # an unknown kind or option before any work
        if not np.array_equal(x.ids, y.ids):
            raise ConfigError(
                f"a {kind} bridge g{source}→g{target} needs the same items in the same order on both sides; pair "
                "the sample by id"
            )
        if x.geometry != y.geometry:
            raise ConfigError(f"a bridge maps within one geometry; g{source} is {x.geometry}, g{target} {y.geometry}")
        xs, ys = fitting_space(x), fitting_space(y)
        if len(xs) < min_pairs(xs.shape[1]):
            raise ConfigError(
                f"a {kind} bridge g{source}→g{target} needs at least {min_pairs(xs.shape[1])} paired items (2 per "
                f"dimension), got {len(xs)}; raise upgrade.paired_fraction"
            )
        order = np.random.default_rng(seed).permutation(len(xs))
        held, kept = order[: len(xs) // 5], order[len(xs) // 5 :]
        trial = create_map(kind, **opts).fit(xs[kept], ys[kept], seed)
        error = relative_error(trial.apply(xs[held]), ys[held])
        fitted = create_map(kind, **opts).fit(xs, ys, seed)
        return cls(
            source, target, fitted, x.geometry, x.curvature, y.curvature, xs.shape[1], ys.shape[1], len(xs), error
        )

    def map_vectors(self, x: np.ndarray) -> np.ndarray:
        """(N, source_width) fitting-space vectors of the source → (N, target_width) of the target, float64."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.source_width:
            raise ConfigError(
                f"{self} maps {self.source_width}-wide vectors of generation {self.source}; got shape "
                f"{tuple(x.shape)} — embed with generation {self.source}'s model"
            )
        return self.map.apply(x)

    def map_gallery(self, g: GalleryEmbeddings) -> GalleryEmbeddings:
        """``g`` (embedded by the source generation) carried into the target's space: the same items, their
        retrieval vectors on the target's manifold (a Lorentz ``emb`` on the target's K-hyperboloid), its logits
        kept (a bridge maps embeddings only)."""
        space, mapped = self.target_space, self.map_vectors(fitting_space(g))
        emb = space.from_tangent(mapped)
        z = space.tangent(mapped, emb)  # what the target's gallery stores as z: the mapped tangent, or the unit rows
        return replace(
            g, curvature=self.target_curvature, z=z.astype(np.float32), emb=emb.astype(np.float32), compat_dim=None
        )

    def save(self, path: Path) -> str:
        """Write the bridge to ``path`` (``.npz``, atomically); returns its sha256 (the lineage records it)."""
        buf = io.BytesIO()
        meta = {
            "kind": np.array(self.kind),
            "source": np.array(self.source, dtype=np.int64),
            "target": np.array(self.target, dtype=np.int64),
            "geometry": np.array(self.geometry),
            "curvatures": np.array([self.source_curvature, self.target_curvature], dtype=np.float64),
            "widths": np.array([self.source_width, self.target_width], dtype=np.int64),
            "sample": np.array(self.sample, dtype=np.int64),
            "fit_error": np.array(self.fit_error, dtype=np.float64),
        }
        np.savez(buf, **meta, **{f"map_{k}": v for k, v in self.map.arrays().items()})
        atomic_write_bytes(path, buf.getvalue())
        return file_sha256(path)

    @classmethod
    def load(
        cls, path: Path, *, sha256: str | None = None, source: int | None = None, target: int | None = None
    ) -> Bridge:
        """The bridge saved at ``path``; with ``sha256``, refused unless the file is the one recorded; with
        ``source`` / ``target``, refused unless it bridges those generations. One line each."""
        path = Path(path)
        if sha256 is not None and path.is_file() and file_sha256(path) != sha256:
            raise IndexIntegrityError(
                f"bridge {path} is not the file the lineage recorded (sha256 differs); restore it, or fit the bridge "
                "again with bctflow upgrade"
            )
        with read_npz(path, f"bridge {path} is", "fit the bridge again") as f:
            arrays = {k: f[k] for k in f.files}
        try:
            kind = str(arrays["kind"])
            bridge = cls(
                source=int(arrays["source"]),
                target=int(arrays["target"]),
                map=MAPS.get(kind).from_arrays({k[4:]: v for k, v in arrays.items() if k.startswith("map_")}),
                geometry=str(arrays["geometry"]),
                source_curvature=float(arrays["curvatures"][0]),
                target_curvature=float(arrays["curvatures"][1]),
                source_width=int(arrays["widths"][0]),
                target_width=int(arrays["widths"][1]),
                sample=int(arrays["sample"]),
                fit_error=float(arrays["fit_error"]),
            )
        except (KeyError, IndexError, ValueError) as err:
            raise IndexIntegrityError(
                f"bridge {path} is damaged ({type(err).__name__}: {err}); fit the bridge again"
            ) from None
        if (source is not None and bridge.source != source) or (target is not None and bridge.target != target):
            raise ConfigError(
                f"bridge {path} maps generation {bridge.source} to {bridge.target}, not {source} to {target}; use the "
                f"bridge fitted for g{source}→g{target}"
            )
        return bridge
