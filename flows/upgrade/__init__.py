"""Upgrade routes between two generations: a bridge fitted and measured, every route measured and the
rule that chooses one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows import lazy_face

#: the package's public face: each name and the module that defines it (imported on first use)
_FACE = {
    "RouteEvidence": "route_rule",
    "choose_route": "route_rule",
}
__all__ = sorted(_FACE)
__getattr__, __dir__ = lazy_face(__name__, _FACE)

if TYPE_CHECKING:  # the face's names for type checkers (re-exported)
    from flows.upgrade.route_rule import RouteEvidence as RouteEvidence
    from flows.upgrade.route_rule import choose_route as choose_route
