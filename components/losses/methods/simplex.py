"""``psp`` and ``lsp``: training-free compatibility through simplex projections
(the Simplex paper, Eqs. 2–4 and 6; docs/design.md §5.8).

The new model trains with the base loss only; its *retrieval features* are
P σ(z) / ‖P σ(z)‖ (PSP) or P z / ‖P z‖ (LSP) of its classifier logits z (see
:mod:`components.models.features`). Against an older gallery the projection
P_(t,k) = [P_(k,k) | 0] keeps the old classes, which therefore must come first
and in the same order: a class order that does not extend the parent's is
refused before training.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from components.errors import ConfigError
from components.losses.base import AlignmentLoss, LossOutput
from components.losses.catalog import register_alignment
from components.models.encoder import ModelOutput
from components.models.spec import ModelSpec


class _SimplexProjection(AlignmentLoss):
    requires_old = False
    trains = False
    kind: ClassVar[str] = ""

    @classmethod
    def model_overrides(cls, options: Any, parent: ModelSpec | None) -> dict[str, Any]:
        return {"features": cls.kind}

    @classmethod
    def check_models(
        cls, options: Any, new_geometry: str, new_dim: int, old_geometry: str | None = None, old_dim: int | None = None
    ) -> None:
        """Any geometry: only the classifier's logits are used."""

    @classmethod
    def check_lineage(cls, options: Any, new_class_order: tuple[int, ...], parent: ModelSpec | None) -> None:
        if parent is None:
            return
        old = tuple(parent.class_order)
        if tuple(new_class_order[: len(old)]) != old:
            raise ConfigError(
                f"{cls.name} needs a class order that extends the parent's: the parent has {list(old)}, "
                f"the new model {list(new_class_order)}; keep every parent class, first and in the parent's order"
            )
        if parent.features != cls.kind:
            raise ConfigError(
                f"{cls.name} compares {cls.kind.upper()} features, but the parent generation's gallery holds "
                f"{parent.features} features; set model.features: {cls.kind} from generation 0 on (or backfill)"
            )

    def forward(self, new: ModelOutput, old: ModelOutput | None, labels: Tensor) -> LossOutput:
        return LossOutput({})


@register_alignment("psp")
class PSP(_SimplexProjection):
    kind = "psp"


@register_alignment("lsp")
class LSP(_SimplexProjection):
    kind = "lsp"
