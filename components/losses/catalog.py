"""The alignment-method catalog: ``@register_alignment`` on a class in its own module.

Every module in ``components/losses/methods/`` is imported on first lookup,
so a new method is one new file — the training loop does not change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.errors import ConfigError
from components.losses.base import AlignmentLoss
from components.plugins import Catalog

__all__ = ["ALIGNMENTS", "available_alignments", "create_alignment", "get_alignment", "register_alignment"]

ALIGNMENTS: Catalog[type[AlignmentLoss]] = Catalog(
    "alignment method", "components.losses.methods", ConfigError, "set alignment.method in params.yaml or pass --alignment"
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


def create_alignment(name: str, options: dict[str, Any] | None = None) -> AlignmentLoss:
    """Instantiate a registered method with validated options."""
    return get_alignment(name).from_options(options)
