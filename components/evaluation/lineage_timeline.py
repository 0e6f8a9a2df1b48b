"""The lineage timeline: generations and backfills in the order they happened, with the production and live
generations — what the registered version's chain text, the lineage picture, the ``bctflow lineage`` notes and the
JSON export read (docs/design.md §7.17).

:meth:`registry.lineage.LineageDB.timeline` builds it from the lineage database (the only place that orders it);
:meth:`Timeline.with_pending` appends the generation being registered, which is not committed yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["BackfillStep", "GenerationStep", "Step", "Timeline", "short_reasons"]


def short_reasons(checks: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The failed checks of a backfill decision in a few characters each (``clip 99% > 95%``): each rule's
    ``short`` text (flows/backfill/rules.py), else — a check recorded before rules wrote one — its rule and numbers."""
    out = []
    for c in checks:
        if c.get("passed", True):
            continue
        value, threshold = c.get("value"), c.get("threshold")
        numbers = f" {value:.3g} vs {threshold:.3g}" if value is not None and threshold is not None else ""
        out.append(str(c.get("short") or f"{c.get('rule', 'rule')}{numbers}"))
    return tuple(out)


@dataclass(frozen=True)
class GenerationStep:
    """One generation. ``version``: its registry version (None: unregistered); ``parent_id``: the generation it was
    aligned to; ``compatible``: the live gallery accepted its queries (None for generation 0 / unknown);
    ``cross`` / ``old_old``: its queries against its parent's gallery and the parent's own, on the timeline's metric;
    ``promoted`` / ``forced``: it was promoted (by a forced override); ``pending``: registered by this run, not yet
    committed; ``backfill_required``: its backfill decision (None: none, generation 0), ``backfill_reasons`` why in
    words and ``backfill_short`` in a few characters each (:func:`short_reasons`); ``night``: the lifecycle night's
    action on it (docs/design.md §7.18)."""

    gen_id: int
    name: str
    alignment: str
    zeta: float | None
    version: str | None
    parent_id: int | None
    compatible: bool | None
    cross: float | None = None
    old_old: float | None = None
    promoted: bool = False
    forced: bool = False
    pending: bool = False
    backfill_required: bool | None = None
    backfill_reasons: tuple[str, ...] = ()
    backfill_short: tuple[str, ...] = ()
    #: the lifecycle night that trained it: what its policy did (``always: full``), empty without a policy
    night: str = ""


@dataclass(frozen=True)
class BackfillStep:
    """Backfill ``event_id``: the gallery re-embedded (``kind`` full / partial, ``reembedded`` of ``total`` items, in
    ``duration_s`` seconds) with generation ``to_gen``; ``zeta_restart``: the ζ the gallery restarted at, if it did."""

    event_id: int
    to_gen: int
    kind: str
    reembedded: int
    total: int
    duration_s: float
    zeta_restart: float | None = None


#: one step of a timeline
Step = GenerationStep | BackfillStep


@dataclass(frozen=True)
class Timeline:
    """``steps`` in the order they happened (generations and backfills interleaved); ``production``: the generation
    the ``production`` alias names; ``live``: the generation whose embeddings fill the live gallery; ``metric``: the
    metric of the generation steps' ``cross`` / ``old_old`` (None: the steps carry none)."""

    steps: tuple[Step, ...]
    production: int | None
    live: int | None
    metric: str | None = None

    @property
    def generations(self) -> tuple[GenerationStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, GenerationStep))

    @property
    def backfills(self) -> tuple[BackfillStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, BackfillStep))

    def generation(self, gen_id: int) -> GenerationStep:
        """The step of generation ``gen_id`` (KeyError when the timeline has none)."""
        for g in self.generations:
            if g.gen_id == gen_id:
                return g
        raise KeyError(gen_id)

    def needs_backfill(self, g: GenerationStep) -> bool:
        """``g``'s decision required a backfill and no backfill has re-embedded the gallery with it yet."""
        return bool(g.backfill_required) and not any(b.to_gen == g.gen_id for b in self.backfills)

    def state(self, gen_id: int) -> str:
        """Generation ``gen_id``'s state in one line, the most telling first — what leads its registered version's
        description, so MLflow's versions table shows it: ``backfill required, not promoted: <why>; compatible with
        the live gallery``, ``not promoted; not compatible with the live gallery``, ``production; compatible with the
        live gallery``. A backfill with the generation settles the backfill it required."""
        g = self.generation(gen_id)
        forced = " (forced)" if g.forced else ""
        if gen_id == self.production:
            role = f"production{forced}"
        elif g.promoted:
            role = f"promoted{forced}, no longer production"
        else:
            role = "not promoted"
        if gen_id == self.live:
            fact = "its embeddings fill the live gallery"
        elif g.compatible is None:
            fact = "compatibility with the live gallery not measured"
        else:
            fact = f"{'' if g.compatible else 'not '}compatible with the live gallery"
        why = "; ".join(g.backfill_reasons) or "the decision gave no reason"
        if self.needs_backfill(g):
            lead = f"backfill required, not promoted: {why}" if role == "not promoted" else f"backfill required: {why}"
            return "; ".join([lead, fact] if role == "not promoted" else [lead, role, fact])
        return f"{role}; {fact}"

    def with_pending(self, step: GenerationStep) -> Timeline:
        """This timeline with ``step`` — the generation being registered — at its end, marked pending. It is
        production when it passed the gate (``step.promoted``) and fills the live gallery when none does yet
        (generation 0 embeds it)."""
        pending = replace(step, pending=True)
        return Timeline(
            steps=(*self.steps, pending),
            production=pending.gen_id if pending.promoted else self.production,
            live=pending.gen_id if self.live is None else self.live,
            metric=self.metric,
        )
