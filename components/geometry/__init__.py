"""Geometry: the Lorentz model of hyperbolic space and the spaces the rest of the code is handed (docs/design.md §2).

:mod:`components.geometry.lorentz` holds the maths; :mod:`components.geometry.space` the seam (a :class:`Space`, its
catalog); :mod:`components.geometry.spaces` one module per registered space.
"""

from components.geometry import lorentz
from components.geometry.lorentz import *  # noqa: F403 (the package re-exports the module's public names)
from components.geometry.space import Space, create_space, list_spaces, register_space
from components.geometry.spaces.euclidean import Euclidean
from components.geometry.spaces.lorentz import Lorentz

__all__ = [*lorentz.__all__, "Euclidean", "Lorentz", "Space", "create_space", "list_spaces", "register_space"]
