"""Gallery embeddings: the rows of a gallery in memory, and one ``.npz`` file of them, written atomically.

Stores what every retrieval view needs: the tangent vectors ``z`` (Lorentz:
the float64 hyperboloid points are rebuilt from them on demand, on whichever
hyperboloid the comparison happens — docs/design.md §2 "Numerics"), the unit vectors
(Euclidean), and the classifier logits (PSP / LSP features, the Simplex
paper; docs/design.md §5.8). :meth:`GalleryEmbeddings.vectors_against`
puts a *query* model's vectors into an older gallery's space: the gallery's K
for Lorentz, the compatible prefix for a model whose head has one (BT²), the old
class count for PSP / LSP.
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from components.errors import IndexIntegrityError
from components.geometry import Space, create_space
from components.io import atomic_write_bytes
from components.models.features import features_space, simplex_features

if TYPE_CHECKING:
    from components.models.spec import ModelSpec
    from components.training.embed import Embeddings

__all__ = ["FEATURES", "GalleryEmbeddings", "read_npz"]

FEATURES = ("embedding", "psp", "lsp")


def _npz_reason(err: Exception) -> str:
    """Why numpy could not read an ``.npz`` file, in words that never pass on numpy's advice to load it with
    ``allow_pickle`` (which would run whatever code the file carries)."""
    text = str(err)
    if "allow_pickle" in text or "pickle" in text:
        return "its bytes are not an .npz archive of arrays (damaged, or another format)"
    return f"{type(err).__name__}: {text.splitlines()[0][:200] if text else 'unreadable'}"


@contextlib.contextmanager
def read_npz(path: Path, what: str = "", fix: str = "re-embed the gallery of that generation") -> Iterator[Any]:
    """The arrays of the file ``path`` (an ``.npz``, read with ``allow_pickle=False``; a gallery's, unless ``what``
    names the file otherwise, e.g. ``bridge <path> is``); a file that is missing, damaged or lacks an array the block
    reads is an IndexIntegrityError naming the file and ``fix``."""
    try:
        with np.load(path, allow_pickle=False) as arrays:
            yield arrays
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as err:
        what = what or f"gallery embeddings {path} are"
        raise IndexIntegrityError(f"{what} missing or damaged ({_npz_reason(err)}); {fix}") from None


@dataclass(frozen=True)
class GalleryEmbeddings:
    """z: (N, D) float32; emb: (N, D) unit vectors or (N, D+1) hyperboloid points, float32;
    ids, labels: (N,) int64; clipped: (N,) bool; logits: (N, C) float32;
    features: the retrieval view; compat_dim: width of the prefix compatible with the
    parent's gallery (the head's ``ModelSpec.compat_prefix``, e.g. BT²), None when the whole vector is."""

    geometry: str
    curvature: float
    z: np.ndarray
    emb: np.ndarray
    ids: np.ndarray
    labels: np.ndarray
    clipped: np.ndarray
    logits: np.ndarray
    features: str = "embedding"
    compat_dim: int | None = None

    def take(self, pos: np.ndarray) -> GalleryEmbeddings:
        """The rows at ``pos`` ((M,) int positions), in that order."""
        return replace(
            self,
            z=self.z[pos],
            emb=self.emb[pos],
            clipped=self.clipped[pos],
            logits=self.logits[pos],
            ids=self.ids[pos],
            labels=self.labels[pos],
        )

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def space(self) -> Space:
        """The embedding model's space (its stored ``geometry`` at its ``curvature``): what ``z`` and ``emb`` are."""
        return create_space(self.geometry, self.curvature)

    @property
    def retrieval_space(self) -> Space:
        """The space the retrieval vectors live in: the model's for its embedding; PSP / LSP features are unit
        vectors (cosine, :func:`~components.models.features.features_space`)."""
        return features_space(self.space, self.features)

    @property
    def width(self) -> int:
        """Width of this gallery's retrieval vectors."""
        if self.features != "embedding":
            return self.logits.shape[1]
        return self.space.point_width(self.z.shape[1])

    def view(self, features: str) -> GalleryEmbeddings:
        """The same embeddings under another retrieval view (the logits are stored, so no re-embedding)."""
        if features not in FEATURES:
            raise ValueError(f"unknown features {features!r}; use one of {FEATURES}")
        return replace(self, features=features)

    def vectors(self, curvature: float | None = None) -> np.ndarray:
        """float64 retrieval vectors in this gallery's own space.

        embedding: the space's points (:meth:`Space.points <components.geometry.space.Space.points>`): unit vectors
        (N, D), or z lifted onto the K-hyperboloid (N, D+1) — at ``curvature`` where given;
        psp / lsp: simplex features over all classes (N, C).
        """
        if self.features != "embedding":
            return simplex_features(self.logits, self.features)
        space = self.space if curvature is None else self.space.at(curvature)
        return space.points(self.z, self.emb)

    def incompatibility(self, gallery: GalleryEmbeddings) -> str | None:
        """Why these (query) embeddings cannot search ``gallery``; None when they can."""
        if not np.array_equal(self.ids, gallery.ids):
            return "the galleries hold different items (dataset or split changed)"
        if self.features != gallery.features:
            return f"features {self.features} vs {gallery.features}"
        if self.features != "embedding":
            if self.logits.shape[1] < gallery.logits.shape[1]:
                return f"{self.logits.shape[1]} classes cannot be projected onto {gallery.logits.shape[1]}"
            return None
        if self.geometry != gallery.geometry:
            return f"geometry {self.geometry} vs {gallery.geometry}"
        own, other = self.z.shape[1], gallery.z.shape[1]
        # a compatible prefix (BT²) covers its parent's width, and (nested) every ancestor's
        if own != other and not (self.compat_dim is not None and other <= self.compat_dim):
            return f"dimension {own} vs {other}"
        return None

    def vectors_against(self, gallery: GalleryEmbeddings) -> np.ndarray:
        """These embeddings as queries in ``gallery``'s space, float64 (see the module docstring)."""
        why = self.incompatibility(gallery)
        if why is not None:
            raise ValueError(f"these embeddings cannot query that gallery: {why}")
        if self.features != "embedding":
            return simplex_features(self.logits, self.features, gallery.logits.shape[1])
        space = self.space.at(gallery.curvature)
        if self.z.shape[1] != gallery.z.shape[1]:  # a wider model with a compatible prefix: compare the prefix only
            return space.from_tangent(self.z[:, : gallery.z.shape[1]])
        return space.points(self.z, self.emb)

    def save(self, path: Path, **extra: np.ndarray) -> None:
        """Write the rows to ``path`` (``.npz``) atomically; ``extra``: more named arrays stored beside them (see
        :meth:`load_with`). A part of a store (:mod:`components.indexing.parts`) is such a file."""
        buf = io.BytesIO()
        np.savez(
            buf,
            geometry=np.array(self.geometry),
            curvature=np.array(self.curvature, dtype=np.float64),
            z=self.z.astype(np.float32),
            emb=self.emb.astype(np.float32),
            ids=self.ids.astype(np.int64),
            labels=self.labels.astype(np.int64),
            clipped=self.clipped.astype(bool),
            logits=self.logits.astype(np.float32),
            features=np.array(self.features),
            compat_dim=np.array(-1 if self.compat_dim is None else self.compat_dim, dtype=np.int64),
            **extra,
        )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(Path(path), buf.getvalue())

    @classmethod
    def load(cls, path: Path) -> GalleryEmbeddings:
        return cls.load_with(path)[0]

    @classmethod
    def load_with(
        cls, path: Path, *extra: str, optional: tuple[str, ...] = ()
    ) -> tuple[GalleryEmbeddings, dict[str, np.ndarray]]:
        """The gallery at ``path`` and the ``extra`` arrays saved beside it (one read of the file); ``optional``:
        more arrays, returned where the file holds them."""
        with read_npz(Path(path)) as f:
            compat = int(f["compat_dim"])
            gallery = cls(
                geometry=str(f["geometry"]),
                curvature=float(f["curvature"]),
                z=f["z"],
                emb=f["emb"],
                ids=f["ids"],
                labels=f["labels"],
                clipped=f["clipped"],
                logits=f["logits"],
                features=str(f["features"]),
                compat_dim=None if compat < 0 else compat,
            )
            return gallery, {name: f[name] for name in extra} | {n: f[n] for n in optional if n in f.files}

    @classmethod
    def from_embeddings(
        cls, emb: Embeddings, spec: ModelSpec, curvature: float, ids: np.ndarray, labels: np.ndarray
    ) -> GalleryEmbeddings:
        """Build from embedded images and the model's spec (its geometry, features and compatible prefix)."""
        return cls(
            geometry=spec.geometry,
            curvature=float(curvature),
            z=emb.z,
            emb=emb.emb,
            ids=np.asarray(ids, dtype=np.int64),
            labels=np.asarray(labels, dtype=np.int64),
            clipped=emb.clipped,
            logits=emb.logits,
            features=spec.features,
            compat_dim=spec.compat_prefix,
        )
