"""A generation's gallery embeddings on disk (``gallery.npz``), written atomically.

Stores the tangent vectors ``z`` (N, d) float32 rather than hyperboloid points:
the float64 retrieval vectors are rebuilt from them on demand, on whichever
hyperboloid (curvature K) the comparison happens (design §2 "Numerics").
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from components.errors import IndexIntegrityError
from components.geometry import expmap0
from components.io import atomic_write_bytes

__all__ = ["GalleryEmbeddings"]


@dataclass(frozen=True)
class GalleryEmbeddings:
    """z: (N, d) float32; emb: (N, D) float32 (unit vectors / hyperboloid points);
    ids, labels: (N,) int64; clipped: (N,) bool."""

    geometry: str
    curvature: float
    z: np.ndarray
    emb: np.ndarray
    ids: np.ndarray
    labels: np.ndarray
    clipped: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def vectors(self, curvature: float | None = None) -> np.ndarray:
        """float64 retrieval vectors: unit vectors (N, d), or z lifted onto the K-hyperboloid (N, d+1)."""
        if self.geometry == "lorentz":
            k = self.curvature if curvature is None else curvature
            return expmap0(torch.from_numpy(self.z).double(), k).numpy()
        e = self.emb.astype(np.float64)
        return e / np.linalg.norm(e, axis=1, keepdims=True).clip(1e-300)

    def save(self, path: Path) -> None:
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
        )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(Path(path), buf.getvalue())

    @classmethod
    def load(cls, path: Path) -> "GalleryEmbeddings":
        p = Path(path)
        try:
            with np.load(p, allow_pickle=False) as f:
                return cls(
                    geometry=str(f["geometry"]),
                    curvature=float(f["curvature"]),
                    z=f["z"],
                    emb=f["emb"],
                    ids=f["ids"],
                    labels=f["labels"],
                    clipped=f["clipped"],
                )
        except (OSError, KeyError, ValueError) as err:
            raise IndexIntegrityError(f"gallery embeddings {p} are missing or damaged ({err}); re-embed the gallery of that generation") from None
