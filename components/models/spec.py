"""ModelSpec: everything needed to rebuild a generation's model, stored in its checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from components.geometry import Lorentz, Space, create_space, list_spaces
from components.models.features import features_space
from components.models.head_catalog import HEADS

__all__ = ["IDENTITY_FIELDS", "INERT_EUCLIDEAN_HEAD", "ModelSpec"]

#: Fields that define what a checkpoint *is*; a mismatch on any of them means
#: the weights cannot serve the requested model.
IDENTITY_FIELDS = (
    "backbone",
    "head",
    "extra_dims",
    "compat_dim",
    "features",
    "backbone_kwargs",
    "small_stem",
    "in_chans",
    "embed_dim",
    "geometry",
    "curvature",
    "zeta",
    "tangent_scale",
    "input_size",
    "num_classes",
    "class_order",
    "classifier",
    "bn_neck",
)

#: What a Lorentz model holds in the Euclidean head's and classifier's fields (design §3.5), whatever params say: a
#: Lorentz model classifies with its Lorentz MLR and never reads them. The values are the ones every Lorentz checkpoint
#: was written with while they were params' defaults; pinned, so that the Euclidean head's settings (and their
#: defaults) do not move a Lorentz model's identity, its checkpoint check or a benchmark's cache key.
INERT_EUCLIDEAN_HEAD: dict[str, Any] = {"classifier": "cosine", "bn_neck": True, "classifier_scale": 16.0}


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What a model is (stored in its checkpoint). The fields params sets have no defaults here: the params schema
    holds them (``flows/params/specs.py`` builds a spec from params and the data); the rest default to the plain
    model."""

    backbone: str
    embed_dim: int
    #: the name of a registered space (components/geometry/spaces/); :attr:`space` is the space itself
    geometry: str
    num_classes: int
    class_order: tuple[int, ...]
    class_names: tuple[str, ...] = ()
    in_chans: int
    image_size: int
    small_stem: bool
    backbone_kwargs: dict[str, Any]
    curvature: float
    learn_curvature: bool
    zeta: float | None
    classifier_scale: float
    #: Lorentz models: fixed scale s on the Lorentz MLR's logits (1.0: HBCT Eq. (9) as published)
    mlr_scale: float
    #: Euclidean classifier: "cosine" (unit rows, no bias) or "linear" (with bias); a Lorentz model holds
    #: :data:`INERT_EUCLIDEAN_HEAD`'s value here and in the two fields around it
    classifier: Literal["cosine", "linear"]
    #: Euclidean head: BatchNorm on the embedding before L2 normalisation (centres it)
    bn_neck: bool
    norm_mean: tuple[float, ...]
    norm_std: tuple[float, ...]
    #: a head of the catalog (components/models/heads/): "standard" (the geometry's plain head) or "bt2" (BT²'s
    #: basis transformation, embed_dim + extra_dims wide, its first compat_dim dimensions compatible with the
    #: parent's gallery; the three fields below are its settings and stay 0 / None / 1.0 for other heads)
    head: str = "standard"
    extra_dims: int = 0
    compat_dim: int | None = None
    bt2_scale: float = 1.0  # BT² Algorithm 1's constant C (weight of φ'_new's information)
    #: Lorentz: z ← (z/√d)·tangent_scale before the clip. A ζ-restarting backfill serves a generation
    #: rescaled into the ζ₀ ball: tangent_scale = ζ₀/ζ_g and zeta = ζ₀, i.e. exactly its embeddings × ζ₀/ζ_g
    tangent_scale: float = 1.0
    #: Lorentz: how the tangent radius is bounded at ζ ("clip" or the smooth "tanh" squash, models/radial.py)
    radial: Literal["clip", "tanh"] = "clip"
    #: Lorentz: a learned scale α ≤ 1 (initialised 1/√d) in place of the fixed 1/√d before the bound
    learn_scale: bool = False
    #: resize inputs to input_size × input_size inside the model (e.g. 224 for a ViT fed 32×32 images); None = as given
    input_size: int | None = None
    #: retrieval features: the embedding, or PSP / LSP simplex projections of the classifier output
    features: Literal["embedding", "psp", "lsp"]

    def __post_init__(self) -> None:
        if self.geometry not in list_spaces():
            raise ValueError(f"geometry must be one of {list_spaces()}, got {self.geometry!r}")
        if self.num_classes != len(self.class_order):
            raise ValueError(f"num_classes={self.num_classes} but class_order has {len(self.class_order)} entries")
        if self.curvature <= 0:
            raise ValueError(f"curvature K must be > 0, got {self.curvature}")
        if self.space.radius_encodes_confidence and (self.zeta is None or self.zeta <= 0):
            raise ValueError(f"a {self.geometry} model needs a clip radius zeta > 0, got {self.zeta}")
        if isinstance(self.space, Lorentz):  # fields it never reads: one value for every Lorentz model
            for name, value in INERT_EUCLIDEAN_HEAD.items():
                object.__setattr__(self, name, value)
        HEADS.get(self.head).check(self)

    @property
    def space(self) -> Space:
        """The model's space: its ``geometry`` at its ``curvature`` (a learned K: the value it started from)."""
        return create_space(self.geometry, self.curvature)

    @property
    def retrieval_space(self) -> Space:
        """The space its retrieval vectors live in: :attr:`space` for the embedding, unit vectors for PSP / LSP."""
        return features_space(self.space, self.features)

    @property
    def output_dim(self) -> int:
        """Width of the embedding z, as the head says: embed_dim, or embed_dim + extra_dims for the BT² head."""
        return HEADS.get(self.head).output_dim(self)

    @property
    def compat_prefix(self) -> int | None:
        """Width of the prefix of z compatible with the parent's gallery, as the head says (BT²: compat_dim); None
        when the whole embedding is."""
        return HEADS.get(self.head).compat_prefix(self)

    @property
    def stored_dim(self) -> int:
        """Width of a gallery vector: the embedding (+1 time coordinate for Lorentz), or the class count for PSP/LSP."""
        if self.features != "embedding":
            return self.num_classes
        return self.space.point_width(self.output_dim)

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (loadable with ``torch.load(weights_only=True)``)."""
        d = asdict(self)
        for k in ("class_order", "class_names", "norm_mean", "norm_std"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown model metadata fields {sorted(unknown)}")
        d = dict(d)
        for k in ("class_order", "class_names", "norm_mean", "norm_std"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)

    def mismatches(self, other: ModelSpec, names: tuple[str, ...] = IDENTITY_FIELDS) -> list[str]:
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
