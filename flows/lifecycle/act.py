"""Carry out a night's choice through the code the commands run (docs/design.md §7.18): ``bctflow promote``,
``bctflow backfill [--fraction f]``, ``bctflow backfill --transform``, the adapter ``bctflow upgrade`` fitted.

Every action is resumable as its command is: a backfill killed half-way resumes from its work folder when the same
request is made again, and one already switched is recognised and not run twice; a promotion of the production
generation records nothing. So a night found ``acting`` (:mod:`flows.lifecycle.night`) runs its action again and
ends where an uninterrupted night ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.errors import LineageError
from flows.backfill.flow import backfill
from flows.backfill.make import finished_backfill, plan_backfill
from flows.generation.promotion import promote
from flows.params import Params
from flows.runtime.workspace import Workspace
from registry.orm import Night

__all__ = ["Acted", "act"]


@dataclass(frozen=True)
class Acted:
    """What an action did: items re-embedded (or carried through a map), its worker-seconds, the backfill event or
    bridge it made, the generation that is production afterwards."""

    items: int = 0
    seconds: float = 0.0
    backfill_id: int | None = None
    bridge_id: int | None = None
    production: int | None = None
    #: a full re-embedding spread over nights: the items it still has to embed (0: published, or none begun)
    left: int = 0


def _promote(params: Params, ws: Workspace, generation: int, by: str, reason: str) -> int:
    """Make ``generation`` production: through the gate where it passes, else by the policy's decision, recorded as
    an override with the policy's reason (the gate's rules then warn: docs/design.md §7.18)."""
    from components.errors import ConfigError

    try:
        res = promote(params, ws, generation, by=by, reason=reason)
    except ConfigError as err:
        if "failed the promotion gate" not in str(err):
            raise
        res = promote(params, ws, generation, force=True, by=by, reason=reason)
    return int(res["generation"])


def _backfill(params: Params, ws: Workspace, target: int, fraction: float, transform: bool = False,
              max_items: int | None = None) -> Acted:  # fmt: skip
    top_up = 0.0 < fraction < 1.0 and not transform  # the gallery's share embedded by the target afterwards
    """A backfill as ``bctflow backfill`` runs it (resumed when a killed one left its work; skipped when the live
    gallery is already the one it would publish); ``max_items``: at most that many more items tonight, published
    only once every item is embedded."""
    plan = plan_backfill(params, ws, target=target, fraction=fraction, transform=transform, top_up=top_up)
    repeated = finished_backfill(plan)
    if repeated is not None:
        return Acted(backfill_id=repeated)
    summary: dict[str, Any] = backfill(plan, max_items=max_items)
    if summary.get("paused"):
        return Acted(items=int(max_items or 0), left=int(summary["left"]))
    with ws.lineage(params, readonly=True) as store:
        event = next(e for e in store.backfills() if e.id == summary["event"])
        seconds = float((event.metrics or {}).get("run_embed_s", 0.0))
        items = event.reembedded + sum(g.selected for g in plan.galleries if g.corpus)  # both galleries' selected items
    return Acted(items=0 if transform else int(items), seconds=seconds, backfill_id=int(summary["event"]))


def _planned_items(row: Night) -> int:
    """The items the night's chosen option plans to re-embed (``row.items`` is what the action did, set after it)."""
    chosen = [o for o in row.options or [] if o.get("chosen")]
    if not chosen:
        raise LineageError(f"night {row.night} records no chosen option (decided by an older bctflow); decide it again")
    return int(chosen[0]["items"])


def act(params: Params, ws: Workspace, row: Night) -> Acted:
    """Carry out night ``row``'s action (its ``action``, ``fraction``, ``target_generation_id``)."""
    by, reason, target = f"lifecycle:{row.policy}", f"night {row.night}: {row.reason}", row.target_generation_id
    if row.action == "keep" or target is None:
        return Acted()
    if row.action in ("promote", "adapter"):
        return Acted(production=_promote(params, ws, target, by, reason))
    carry = row.carry or {}
    if row.action == "begin" or (row.action == "continue" and carry.get("mode") == "full"):
        done = _backfill(params, ws, target, 1.0, max_items=_planned_items(row))
        return done if done.left else Acted(done.items, done.seconds, done.backfill_id, production=target)
    fraction = 1.0 if row.action in ("full", "transform") else float(row.fraction or 1.0)
    done = _backfill(params, ws, target, fraction, transform=row.action == "transform")
    if row.action in ("partial", "continue", "transform"):  # the live gallery now answers the target's queries
        return Acted(done.items, done.seconds, done.backfill_id, production=_promote(params, ws, target, by, reason))
    return Acted(done.items, done.seconds, done.backfill_id, production=target)
