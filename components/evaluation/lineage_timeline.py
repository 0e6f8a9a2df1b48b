"""The lineage timeline: generations and backfills in the order they happened, with the production and live
generations — what the registered version's chain text, the lineage picture, the ``bctflow lineage`` notes and the
JSON export read (docs/design.md §7.17).

:meth:`registry.lineage.LineageStore.timeline` builds it from the lineage database (the only place that orders it);
:meth:`Timeline.with_pending` appends the generation being registered, which is not committed yet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["BackfillStep", "GenerationStep", "Step", "Timeline"]


@dataclass(frozen=True)
class GenerationStep:
    """One generation. ``version``: its registry version (None: unregistered); ``parent_id``: the generation it was
    aligned to; ``compatible``: the live gallery accepted its queries (None for generation 0 / unknown);
    ``cross`` / ``old_old``: its queries against its parent's gallery and the parent's own, on the timeline's metric;
    ``promoted`` / ``forced``: it was promoted (by a forced override); ``pending``: registered by this run, not yet
    committed."""

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
