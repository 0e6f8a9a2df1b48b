"""The lineage's bridges (revision 0008; docs/design.md §11): record a fitted map between two generations, list
them, and answer which chain of maps carries one generation's vectors into another's space; and the upgrade route a
rule took for a generation (revision 0009).

A mixin of :class:`registry.lineage.LineageDB` (its sessions, paths and write guard): each record is one
transaction, its version the next of its (from, to, role).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from components.errors import LineageError
from registry.orm import ChosenRoute, FittedBridge, Generation
from registry.records import ROUTES, BridgeRecord, RouteChoiceRecord

__all__ = ["ROLES", "BridgeLedger"]

#: what a bridge does: ``adapter`` maps a new generation's queries into its parent's space, ``transform`` maps stored
#: vectors of an old generation into a new one's
ROLES = ("adapter", "transform")


def _require_generations(s: Any, ids: tuple[int, ...], what: str, fix: str) -> None:
    """LineageError in one line when ``what`` names a generation of ``ids`` the lineage (session ``s``) lacks."""
    known = set(s.scalars(select(Generation.id)))
    missing = [g for g in ids if g not in known]
    if missing:
        raise LineageError(f"{what} names generation {missing[0]}, which this lineage does not hold; {fix}")


class BridgeLedger:
    """Bridge rows of the lineage: a mixin of the store, whose ``_sessions``, ``paths`` and ``_writable`` it uses."""

    _sessions: Any
    paths: Any
    _writable: Any

    def record_bridge(self, bridge: BridgeRecord) -> FittedBridge:
        """Record a fitted bridge as the next version of its (from, to, role); refused in one line, nothing
        written, for an unknown role or a generation the lineage does not hold. Returns the row."""
        self._writable()
        if bridge.role not in ROLES:
            raise LineageError(f"a bridge's role is one of {', '.join(ROLES)}, not {bridge.role!r}")
        try:
            with self._sessions.begin() as s:
                what = f"the {bridge.role} bridge g{bridge.from_generation_id}→g{bridge.to_generation_id}"
                _require_generations(s, (bridge.from_generation_id, bridge.to_generation_id), what,
                                     "fit bridges between committed generations")  # fmt: skip
                newest = s.scalar(
                    select(func.max(FittedBridge.version)).where(
                        FittedBridge.from_generation_id == bridge.from_generation_id,
                        FittedBridge.to_generation_id == bridge.to_generation_id,
                        FittedBridge.role == bridge.role,
                    )
                )
                row = FittedBridge(
                    **self.paths.store_fields(FittedBridge.__tablename__, asdict(bridge)), version=(newest or 0) + 1
                )
                s.add(row)
                s.flush()
                return self.paths.resolve_row(row)
        except SQLAlchemyError as err:
            raise LineageError(f"recording the bridge failed and was rolled back ({err})") from err

    def bridges(self) -> list[FittedBridge]:
        """Every bridge row, oldest first (paths absolute)."""
        with self._sessions() as s:
            return [self.paths.resolve_row(r) for r in s.scalars(select(FittedBridge).order_by(FittedBridge.id))]

    def newest_bridge_id(self) -> int:
        """The newest bridge row's id (0: none) — one aggregate, for a service that watches for new bridges."""
        with self._sessions() as s:
            return int(s.scalar(select(func.max(FittedBridge.id))) or 0)

    def bridge_chain(self, source: int, target: int, role: str) -> list[FittedBridge]:
        """The shortest chain of ``role`` bridges (each link its (from, to)'s newest version) that carries
        ``source``'s vectors into ``target``'s space — an adapter chain g2 → g1 → g0, a transform chain g0 → g1 →
        g2. LineageError in one line where none does."""
        newest: dict[tuple[int, int], FittedBridge] = {}
        for row in self.bridges():
            if row.role == role:
                newest[(row.from_generation_id, row.to_generation_id)] = row  # oldest first: the newest stays
        paths: dict[int, list[FittedBridge]] = {source: []}
        frontier = [source]
        while frontier and target not in paths:  # breadth first: the fewest links
            step = []
            for at in frontier:
                for (a, b), row in sorted(newest.items()):
                    if a == at and b not in paths:
                        paths[b] = [*paths[at], row]
                        step.append(b)
            frontier = step
        if target not in paths:
            raise LineageError(
                f"no chain of {role} bridges carries generation {source}'s vectors into generation {target}'s space "
                f"(reached: {', '.join(f'g{g}' for g in sorted(paths))}); fit the missing bridge"
            )
        return paths[target]

    def record_route_choice(self, choice: RouteChoiceRecord) -> ChosenRoute:
        """Record the route a rule took for a generation (one transaction); refused in one line, nothing written, for
        a route that is not one or a generation the lineage does not hold. Returns the row."""
        self._writable()
        if choice.route not in ROUTES:
            raise LineageError(f"an upgrade route is one of {', '.join(ROUTES)}, not {choice.route!r}")
        try:
            with self._sessions.begin() as s:
                what = f"the {choice.route} route of generation {choice.generation_id}"
                _require_generations(s, (choice.generation_id, choice.from_generation_id), what,
                                     "choose routes between committed generations")  # fmt: skip
                row = ChosenRoute(**asdict(choice))
                s.add(row)
                s.flush()
                return row
        except SQLAlchemyError as err:
            raise LineageError(f"recording the route choice failed and was rolled back ({err})") from err

    def route_choices(self) -> list[ChosenRoute]:
        """Every route choice, oldest first (the newest for a generation is the one in force)."""
        with self._sessions() as s:
            return list(s.scalars(select(ChosenRoute).order_by(ChosenRoute.id)))
