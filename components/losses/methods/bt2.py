"""``bt2``: BT² (Zhou et al., ICCV 2023), docs/design.md §5.7.

The new model gets the BT² head (:class:`components.models.heads.bt2.BT2Head`):
embed_dim + extra_dims wide, built with orthonormal basis transformations, whose
first compat_dim dimensions (φ5) are compared with the old gallery. Losses:

* base loss on φ3 (the classifier's input) — the part that should be as good as an
  independently trained new model;
* influence loss (BCT) of the frozen old classifier on normalise(φ5), so the
  compatible prefix speaks the old model's language;
* ``mimic``: 1 − cos(φ3, φ*(x)) towards the frozen independently trained new
  model φ* (the target BT² builds on), when ``use_reference`` (default) and φ3 has
  φ*'s width (along a chain φ3 widens; the term is then skipped). The paper trains
  φ3 with the base loss only; the mimic term is docs/design.md §5's "uses an independently
  trained new model as target".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from components.errors import ConfigError
from components.geometry import Euclidean
from components.losses.base import AlignmentContext, LossOutput
from components.losses.catalog import register_alignment
from components.losses.methods.bct import BCT
from components.models.encoder import ModelOutput
from components.models.spec import ModelSpec


@dataclass(frozen=True)
class BT2Options:
    extra_dims: int = 32
    scale_c: float = 1.0
    use_reference: bool = True
    synthesize_new_classes: bool = True

    def __post_init__(self) -> None:
        if self.extra_dims < 0:
            raise ValueError(f"extra_dims must be >= 0 (got {self.extra_dims})")


@register_alignment("bt2")
class BT2(BCT):
    requires_old = True
    space = Euclidean.name
    Options = BT2Options  # type: ignore[assignment]

    @classmethod
    def needs_reference(cls, options: BT2Options) -> bool:
        return bool(options.use_reference)

    @classmethod
    def model_overrides(cls, options: BT2Options, parent: ModelSpec | None) -> dict[str, Any]:
        """The BT² head over the parent's width n. Along a chain n grows by extra_dims every step, and
        Algorithm 1 needs n − d ≤ m, so the new model's own width m grows to at least n (the paper's
        series of updates expands the dimension in the same way)."""
        if parent is None:
            raise ConfigError("bt2 needs a parent generation; train generation 0 first")
        n = parent.output_dim
        if options.extra_dims > n:
            raise ConfigError(
                f"bt2 extra_dims ({options.extra_dims}) cannot exceed the parent's width ({n}); "
                "lower alignment.options.bt2.extra_dims"
            )
        return {
            "head": "bt2",
            "compat_dim": n,
            "extra_dims": options.extra_dims,
            "embed_dim": max(parent.embed_dim, n),
            "bt2_scale": options.scale_c,
        }

    @classmethod
    def check_models(
        cls,
        options: BT2Options,
        new_geometry: str,
        new_dim: int,
        old_geometry: str | None = None,
        old_dim: int | None = None,
    ) -> None:
        if new_geometry != cls.space or old_geometry not in (None, cls.space):
            raise ConfigError("bt2 works on Euclidean models; set model.geometry: euclidean for the whole chain")
        if old_geometry is None:
            raise ConfigError("bt2 needs a parent generation; train generation 0 first")

    def prepare(self, ctx: AlignmentContext) -> None:
        if ctx.new_spec.head != "bt2":
            raise ConfigError(
                "bt2 needs the BT² head on the new model (ModelSpec.head = 'bt2'); "
                "build it with the method's model_overrides"
            )
        super().prepare(ctx)

    def forward(
        self, new: ModelOutput, old: ModelOutput | None, labels: Tensor, ref: ModelOutput | None = None
    ) -> LossOutput:
        compat = new.aux["compat"]
        out = super().forward(ModelOutput(compat, compat, None, new.clipped), old, labels)
        terms = dict(out.terms)
        stats = dict(out.stats)
        if self.options.use_reference and ref is not None:
            phi3 = new.aux["independent"]
            if phi3.shape[-1] == ref.emb.shape[-1]:
                terms["mimic"] = (1.0 - (phi3 * F.normalize(ref.emb.float(), dim=-1)).sum(-1)).mean()
            else:  # along a BT² chain φ3 widens beyond the reference's width: cosines would be meaningless
                stats["mimic_skipped"] = 1.0
        return LossOutput(terms, stats)
