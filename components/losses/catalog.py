"""The alignment-method catalog: ``@register_alignment`` on a class in its own module.

Every module in ``components/losses/methods/`` is imported on first lookup,
so a new method is one new file — the training loop does not change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from components.errors import ConfigError
from components.losses.base import AlignmentLoss, EmbeddedGallery, MethodDiagnostics
from components.models.spec import ModelSpec
from components.plugins import Catalog

__all__ = [
    "ALIGNMENTS",
    "AlignmentChoice",
    "available_alignments",
    "choose_alignment",
    "create_alignment",
    "get_alignment",
    "register_alignment",
]

ALIGNMENTS: Catalog[type[AlignmentLoss]] = Catalog(
    "alignment method",
    "components.losses.methods",
    ConfigError,
    "set alignment.method in params.yaml or pass --alignment",
)


def register_alignment(name: str) -> Callable[[type[AlignmentLoss]], type[AlignmentLoss]]:
    def deco(cls: type[AlignmentLoss]) -> type[AlignmentLoss]:
        cls.name = name
        return ALIGNMENTS.register(name)(cls)

    return deco


def available_alignments() -> list[str]:
    return ALIGNMENTS.names()


def get_alignment(name: str) -> type[AlignmentLoss]:
    return ALIGNMENTS.get(name)


@dataclass(frozen=True)
class AlignmentChoice:
    """A registered method with validated options: what is known before training, without building the loss."""

    method: type[AlignmentLoss]
    options: Any

    @property
    def name(self) -> str:
        return self.method.name

    @property
    def trains(self) -> bool:
        return self.method.trains

    @property
    def requires_old(self) -> bool:
        return self.method.requires_old

    @property
    def needs_reference(self) -> bool:
        return self.method.needs_reference(self.options)

    def check_models(
        self, new_geometry: str, new_dim: int, old_geometry: str | None = None, old_dim: int | None = None
    ) -> None:
        self.method.check_models(self.options, new_geometry, new_dim, old_geometry, old_dim)

    def model_overrides(self, parent: ModelSpec | None) -> dict[str, Any]:
        return self.method.model_overrides(self.options, parent)

    def check_lineage(self, new_class_order: tuple[int, ...], parent: ModelSpec | None) -> None:
        self.method.check_lineage(self.options, new_class_order, parent)

    def diagnostics(self, choices: Mapping[str, Any], old: EmbeddedGallery, new: EmbeddedGallery) -> MethodDiagnostics:
        """The method's own health numbers of a model it trained (:meth:`AlignmentLoss.diagnostics`)."""
        return self.method.diagnostics(self.options, choices, old, new)

    def build(self) -> AlignmentLoss:
        """The loss module (built once per training: it may own trainable parts)."""
        return self.method(self.options)


def choose_alignment(name: str, options: dict[str, Any] | None = None) -> AlignmentChoice:
    """A registered method with validated options (ConfigError for an unknown name or bad options)."""
    method = get_alignment(name)
    return AlignmentChoice(method, method.parse_options(options))


def create_alignment(name: str, options: dict[str, Any] | None = None) -> AlignmentLoss:
    """Build a registered method's loss with validated options."""
    return choose_alignment(name, options).build()
