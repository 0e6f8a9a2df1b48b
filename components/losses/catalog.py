"""The alignment-method catalog: ``@register_alignment`` on a class in its own module.

Every module in ``components/losses/methods/`` is imported on first lookup,
so a new method is one new file — the training loop does not change. The catalog's face is
:class:`components.plugins.Catalog`'s: ``register_alignment``, ``create_alignment(name, **options)``,
``list_alignments()``, ``check_alignment_options(name, options)``; :func:`choose_alignment` is a method with its
options validated, before training, without building the loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from components.errors import ConfigError
from components.losses.base import AlignmentLoss, EmbeddedGallery, MethodDiagnostics
from components.models.spec import ModelSpec
from components.plugins import Catalog

__all__ = [
    "ALIGNMENTS",
    "AlignmentChoice",
    "check_alignment_options",
    "choose_alignment",
    "create_alignment",
    "list_alignments",
    "register_alignment",
]


def _option_names(method: type[AlignmentLoss]) -> list[str]:
    return sorted(f.name for f in fields(method.Options))


def _build(method: type[AlignmentLoss], **options: Any) -> AlignmentLoss:
    return method(method.parse_options(options))


ALIGNMENTS: Catalog[type[AlignmentLoss]] = Catalog(
    "alignment method",
    "components.losses.methods",
    ConfigError,
    "set alignment.method in params.yaml or pass --alignment",
    name_attr="name",
    options=_option_names,
    make=_build,
    bad_options="alignment {name!r} has no option(s) {unknown}; its options are {known} "
    "(params.yaml alignment.options.{name})",
)

#: the catalog's face (components/plugins.py): ``@register_alignment("name")`` on an AlignmentLoss subclass (its
#: ``name``), ``list_alignments()``, ``create_alignment(name, **options)`` (the loss, built once per training) and
#: ``check_alignment_options(name, alignment.options.<name>)``
register_alignment, list_alignments = ALIGNMENTS.register, ALIGNMENTS.names
create_alignment, check_alignment_options = ALIGNMENTS.create, ALIGNMENTS.check_options


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


def choose_alignment(name: str, options: Mapping[str, Any] | None = None) -> AlignmentChoice:
    """A registered method with validated options (ConfigError for an unknown name or bad options)."""
    method = ALIGNMENTS.get(name)
    return AlignmentChoice(method, method.parse_options(check_alignment_options(name, options)))
