"""The alignment-method registry: ``@register_alignment`` on a class in its own module.

Every module in ``components/losses/methods/`` is imported on first lookup,
so a new method is one new file — the training loop does not change.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

from components.errors import ConfigError
from components.losses.base import AlignmentLoss

__all__ = ["register_alignment", "get_alignment", "available_alignments", "create_alignment"]

_REGISTRY: dict[str, type[AlignmentLoss]] = {}
_discovered = False


def register_alignment(name: str) -> Callable[[type[AlignmentLoss]], type[AlignmentLoss]]:
    def deco(cls: type[AlignmentLoss]) -> type[AlignmentLoss]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"alignment method {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    import components.losses.methods as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")
    _discovered = True


def available_alignments() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def get_alignment(name: str) -> type[AlignmentLoss]:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown alignment method {name!r}; available: {', '.join(available_alignments())} "
            "(set alignment.method in params.yaml or pass --alignment)"
        ) from None


def create_alignment(name: str, options: dict[str, Any] | None = None) -> AlignmentLoss:
    """Instantiate a registered method with validated options."""
    return get_alignment(name).from_options(options)
