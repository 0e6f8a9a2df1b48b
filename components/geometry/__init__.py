"""Geometry: the Lorentz model of hyperbolic space (docs/design.md §2)."""

from components.geometry import lorentz
from components.geometry.lorentz import *  # noqa: F403 (the package re-exports the module's public names)

__all__ = lorentz.__all__
