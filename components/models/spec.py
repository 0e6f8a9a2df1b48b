"""ModelSpec: everything needed to rebuild a generation's model, stored in its checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

__all__ = ["ModelSpec", "IDENTITY_FIELDS"]

#: Fields that define what a checkpoint *is*; a mismatch on any of them means
#: the weights cannot serve the requested model.
IDENTITY_FIELDS = (
    "backbone",
    "backbone_kwargs",
    "small_stem",
    "in_chans",
    "embed_dim",
    "geometry",
    "curvature",
    "zeta",
    "num_classes",
    "class_order",
)


@dataclass(frozen=True)
class ModelSpec:
    backbone: str
    embed_dim: int
    geometry: Literal["lorentz", "euclidean"]
    num_classes: int
    class_order: tuple[int, ...]
    class_names: tuple[str, ...] = ()
    in_chans: int = 3
    image_size: int = 32
    small_stem: bool = True
    backbone_kwargs: dict[str, Any] = field(default_factory=dict)
    curvature: float = 1.0
    learn_curvature: bool = False
    zeta: float | None = 1.0
    classifier_scale: float = 16.0
    norm_mean: tuple[float, ...] = (0.5,)
    norm_std: tuple[float, ...] = (0.25,)

    def __post_init__(self) -> None:
        if self.geometry not in ("lorentz", "euclidean"):
            raise ValueError(f"geometry must be 'lorentz' or 'euclidean', got {self.geometry!r}")
        if self.num_classes != len(self.class_order):
            raise ValueError(f"num_classes={self.num_classes} but class_order has {len(self.class_order)} entries")
        if self.geometry == "lorentz" and (self.zeta is None or self.zeta <= 0):
            raise ValueError(f"a Lorentz model needs a clip radius zeta > 0, got {self.zeta}")
        if self.curvature <= 0:
            raise ValueError(f"curvature K must be > 0, got {self.curvature}")

    @property
    def stored_dim(self) -> int:
        """Width of a gallery vector: d (euclidean) or d + 1 (hyperboloid point)."""
        return self.embed_dim + (1 if self.geometry == "lorentz" else 0)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (loadable with ``torch.load(weights_only=True)``)."""
        d = asdict(self)
        for k in ("class_order", "class_names", "norm_mean", "norm_std"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelSpec":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown model metadata fields {sorted(unknown)}")
        d = dict(d)
        for k in ("class_order", "class_names", "norm_mean", "norm_std"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)

    def mismatches(self, other: "ModelSpec", names: tuple[str, ...] = IDENTITY_FIELDS) -> list[str]:
        """Human-readable differences on ``names`` (empty when compatible)."""
        out = []
        for n in names:
            a, b = getattr(self, n), getattr(other, n)
            if isinstance(a, float) and isinstance(b, float):
                same = abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
            else:
                same = a == b
            if not same:
                out.append(f"{n}: checkpoint has {a!r}, requested {b!r}")
        return out
