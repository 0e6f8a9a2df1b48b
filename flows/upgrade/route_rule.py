"""The upgrade route a user's bar selects (docs/design.md §11): the cheapest route whose measured quality meets it.

Four routes carry a gallery from generation P to generation G. Each comes with what it would serve once taken and
what it costs the gallery:

* ``compatible`` — G's queries search P's gallery as it is (G trained aligned): serves M(φ_G, φ_P), costs nothing;
* ``adapter`` — G's queries mapped into P's space: serves M(bridge(φ_G), φ_P), costs nothing per stored item (a few
  matrix products per query);
* ``transform`` — P's stored vectors mapped into G's space: serves M(φ_G, bridge(φ_P)), costs the map per item;
* ``backfill`` — every item re-embedded by G: serves M(φ_G, φ_G), costs a forward pass per item.

``upgrade.route: auto`` takes, among the routes whose served mAP reaches the bar (``upgrade.min_map``; left null,
"no worse than now": the live gallery's served mAP as the lineage records it,
:func:`flows.upgrade.choose.route_bar`), the one whose gallery cost (items × seconds per item) is least — at
equal cost the one that serves more, then the earlier in :data:`ROUTES`; when none reaches the bar, the one that
serves the most, said so. Any other value of ``upgrade.route`` is taken as the user's choice, with its measurements
beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.errors import ConfigError
from registry.records import ROUTES  # every route, cheapest in kind first (the tie-break at equal cost and quality)

__all__ = ["ROUTES", "RouteChoice", "RouteEvidence", "check_route", "choose_route"]


@dataclass(frozen=True)
class RouteEvidence:
    """One route as measured: ``served_map`` (None: not measured, never chosen), the gallery's ``seconds_per_item``
    and the ``query_us`` it adds to every query."""

    route: str
    served_map: float | None
    seconds_per_item: float
    query_us: float = 0.0

    def gallery_s(self, items: int) -> float:
        return items * self.seconds_per_item


@dataclass(frozen=True)
class RouteChoice:
    """The route taken, whether it met the bar, and the one line that says why (the run's output, MLflow, lineage)."""

    route: str
    met_bar: bool
    line: str
    evidence: tuple[RouteEvidence, ...]


def check_route(route: str) -> str:
    """``route`` when it is ``auto`` or one of :data:`ROUTES`; else ConfigError in one line."""
    if route != "auto" and route not in ROUTES:
        raise ConfigError(f"upgrade route {route!r} is not a route; use auto or one of {', '.join(ROUTES)}")
    return route


def _fmt(e: RouteEvidence, items: int) -> str:
    served = "not measured" if e.served_map is None else f"mAP {e.served_map:.4f}"
    return f"{e.route} {served}, {e.gallery_s(items):,.1f} s"


def choose_route(
    evidence: list[RouteEvidence], *, items: int, min_map: float | None, route: str = "auto", bar: str | None = None
) -> RouteChoice:
    """The route ``route`` names, or with ``auto`` the cheapest whose served mAP reaches ``min_map`` (the module
    docstring's rule) for a gallery of ``items``; ``bar``: the words naming the bar in the line (default
    ``upgrade.min_map <min_map>``). ConfigError in one line for an unknown route or a chosen route with no
    measurement; ValueError for ``auto`` without a bar (a caller's mistake: bctflow resolves it first)."""
    check_route(route)
    by_route = {e.route: e for e in evidence}
    measured = [e for e in evidence if e.served_map is not None]
    listing = "; ".join(_fmt(e, items) for e in sorted(evidence, key=lambda e: ROUTES.index(e.route)))
    if route != "auto":
        if route not in by_route or by_route[route].served_map is None:
            raise ConfigError(f"upgrade.route {route} was not measured for this generation ({listing}); measure it")
        e = by_route[route]
        met = min_map is None or e.served_map >= min_map  # type: ignore[operator]
        return RouteChoice(route, met, f"upgrade route {route} (set by upgrade.route): {listing}", tuple(evidence))
    if min_map is None:
        raise ValueError("route auto takes the cheapest route reaching a bar: pass min_map")
    bar = bar or f"upgrade.min_map {min_map:.4f}"
    if not measured:
        raise ConfigError(f"no upgrade route was measured ({listing}); fit a bridge with bctflow upgrade first")
    meets = [e for e in measured if e.served_map >= min_map]  # type: ignore[operator]
    rank = {r: i for i, r in enumerate(ROUTES)}
    if meets:
        best = min(meets, key=lambda e: (e.gallery_s(items), -e.served_map, rank[e.route]))  # type: ignore[operator]
        why = f"the cheapest route reaching {bar} for {items:,} items"
    else:
        best = max(measured, key=lambda e: (e.served_map, -rank[e.route]))  # type: ignore[type-var]
        why = f"no route reaches {bar}; this one serves the most"
    return RouteChoice(best.route, bool(meets), f"upgrade route {best.route}: {why} ({listing})", tuple(evidence))
