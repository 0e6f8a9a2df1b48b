"""Bridges between generations' embedding spaces (docs/design.md §11): a query adapter or a gallery transform is a
:class:`~components.bridges.base.Bridge`; a chain of them carries g2's queries through g1 to g0's gallery."""

from components.bridges.base import (
    MAPS,
    Bridge,
    BridgeMap,
    check_map_options,
    create_map,
    fitting_space,
    list_maps,
    register_map,
    relative_error,
)
from components.bridges.chain import BridgeChain

__all__ = [
    "MAPS",
    "Bridge",
    "BridgeChain",
    "BridgeMap",
    "check_map_options",
    "create_map",
    "fitting_space",
    "list_maps",
    "register_map",
    "relative_error",
]
