"""A night's options with their forecasts and costs (docs/design.md §7.18, §11): what a policy chooses from.

From the lineage (the live gallery, production, the night's new generation and its recorded decision) and the
generations' own embeddings of the labelled evaluation split, every forecast is :func:`~flows.lifecycle.served.
served_map` of some queries over some gallery — the measure the night's outcome is taken with:

* ``keep``     production's queries (through the lineage's adapter chain where the gallery does not accept them) on
               the live gallery: today's served mAP.
* ``promote``  the new generation's queries on the live gallery (only where the gallery accepts them: the measured
               compatibility fact).
* ``partial``  the new generation's queries on the live gallery with ``f`` of it re-embedded by the new generation in
               the backfill's order, for every ``lifecycle.step`` of ``f`` (only where a partial backfill may mix:
               the gallery accepts its queries). ``continue``: the same toward a re-embedding carried over.
* ``full``     the new generation on its own gallery (a full backfill).
* ``adapter`` / ``transform``  (the ``budget`` policy only: they fit both bridges) the served mAP the route
               measurement records (:func:`flows.upgrade.choose.choose_upgrade`).

Costs: items re-embedded (both galleries a backfill keeps current: the evaluation split and the serving corpus) and
worker-seconds at the embedding rate the backfill plan measures, or that the last backfill recorded.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

from components.bridges.base import Bridge
from components.bridges.chain import BridgeChain
from components.errors import LineageError
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.reader import PartReader
from components.indexing.version import GalleryVersion
from flows.backfill.rules import vetoed
from flows.generation.registration import gate_failures
from flows.lifecycle.policies import Carry, Night, Option
from flows.lifecycle.served import live_evaluation, own_evaluation, partial_gallery, served_map
from flows.params import Params
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB

__all__ = ["GalleryFacts", "gallery_facts", "night_options", "production_queries"]

#: worker-seconds per item re-embedded when no backfill measured it yet (a narrow CPU model's order of magnitude)
_DEFAULT_S_PER_ITEM = 1e-3


@dataclass(frozen=True)
class GalleryFacts:
    """The live gallery's item counts (what a backfill re-embeds) and the newest measured seconds per item."""

    evaluation_items: int
    corpus_items: int
    seconds_per_item: float

    @property
    def items(self) -> int:
        return self.evaluation_items + self.corpus_items


def gallery_facts(store: LineageDB) -> GalleryFacts:
    """Counts from the live version's part stores; the rate from the newest full backfill that timed its embedding."""
    ptr = store.live_pointer()
    assert ptr is not None
    version = GalleryVersion.of_index(ptr.index_path)
    evaluation = len(PartReader(version.evaluation_gallery()))
    served = version.serving()
    corpus = len(PartReader(served.gallery)) if served.corpus else 0
    rate = _DEFAULT_S_PER_ITEM
    for event in reversed(store.backfills()):  # a full backfill re-embeds every item of both galleries
        m = event.metrics or {}
        seconds, items = m.get("run_embed_s"), m.get("run_items")
        if event.kind == "full" and seconds and items:
            rate = float(seconds) / float(items)
            break
    return GalleryFacts(evaluation, corpus, rate)


def production_queries(ws: Workspace, store: LineageDB, production: int, accepted: list[int]) -> GalleryEmbeddings:
    """Production's embeddings of the evaluation split as the service sends them: its own where the live gallery
    accepts them, else carried by the lineage's adapter chain into a generation it accepts."""
    own = own_evaluation(ws, production)
    if production in accepted:
        return own
    for target in accepted:
        with contextlib.suppress(LineageError):
            links = store.bridge_chain(production, target, "adapter")
            return BridgeChain(tuple(Bridge.load(b.path, sha256=b.sha256) for b in links)).map_gallery(own)
    return own  # no chain: its raw queries (what the service would refuse: served_map scores them as they fall)


def _cost(facts: GalleryFacts, items: int) -> float:
    return items * facts.seconds_per_item


def night_options(params: Params, ws: Workspace, store: LineageDB, *, night: int, generation: int | None,
                  carry: Carry | None, routes: bool) -> Night:  # fmt: skip
    """The night's :class:`~flows.lifecycle.policies.Night`: every option with its forecast and cost. ``routes``:
    also fit and measure the adapter and transform routes (the ``budget`` policy; the others never take them)."""
    ptr = store.live_pointer()
    assert ptr is not None
    accepted = list(ptr.compatible_generations or [ptr.generation_id])
    production = store.production_generation_id()
    production = ptr.generation_id if production is None else production
    live, rows = live_evaluation(store)
    facts = gallery_facts(store)
    keep = served_map(params, production_queries(ws, store, production, accepted), rows)
    options = [Option("keep", production, keep, note="today's served mAP")]
    since = _nights_since_backfill(store)
    if generation is None:
        if carry is not None:
            options += _carry_options(params, ws, store, live, rows, facts, carry)
        return Night(night, None, False, False, False, since, tuple(options), carry)
    g = store.generation(generation)
    decision = store.decision(generation)
    checks = list(decision.checks) if decision is not None else []
    compatible = bool(g.compatible_with_live) and generation in accepted
    new = own_evaluation(ws, generation)
    if compatible:
        options.append(Option("promote", generation, served_map(params, new, rows)))
        step, order, seed = params.lifecycle.step, params.backfill.order, 0
        for k in range(1, math.ceil(1.0 / step)):
            f = round(k * step, 6)
            mixed, items = partial_gallery(live, rows, new, generation, f, order, seed)
            n = round(f * facts.corpus_items) + items  # the corpus re-embedded in the same share
            options.append(Option("partial", generation, served_map(params, new, mixed), n, _cost(facts, n), f))
    full = facts.items
    options.append(Option("full", generation, served_map(params, new, new), full, _cost(facts, full), 1.0))
    if carry is not None and (carry.mode == "full" or carry.target != generation):
        options += _carry_options(params, ws, store, live, rows, facts, carry)
    veto = vetoed(checks)
    if routes and not veto:  # a vetoed generation is not served: its bridges are not worth fitting
        options += _route_options(params, ws, generation, facts)
    required = bool(decision.required) if decision is not None else False
    gate = not gate_failures(g.compatible_with_live, checks, params.backfill.gate)
    reasons = tuple(decision.reasons) if decision is not None else ()
    return Night(night, generation, compatible, required, gate, since, tuple(options), carry, reasons, veto).holding()


def _carry_options(params: Params, ws: Workspace, store: LineageDB, live: PartReader, rows: GalleryEmbeddings,
                   facts: GalleryFacts, carry: Carry) -> list[Option]:  # fmt: skip
    """Continue the re-embedding carried over: a full one by the night's budget (its forecast: the target's own
    gallery when that finishes it, today's served mAP while it is still unpublished); a partial one each step from
    where it is to its goal."""
    new = own_evaluation(ws, carry.target)
    if carry.mode == "full":
        budget = params.lifecycle.budget_items
        n = carry.left if budget is None else min(carry.left, budget)
        forecast = served_map(params, new, new) if n >= carry.left else None
        return [Option("continue", carry.target, forecast, n, _cost(facts, n), 1.0 if n >= carry.left else None)]
    out = []
    f = carry.done
    while f < carry.goal - 1e-9:
        f = min(carry.goal, round(f + params.lifecycle.step, 6))
        mixed, items = partial_gallery(live, rows, new, carry.target, f, params.backfill.order, 0)
        n = round((f - carry.done) * facts.corpus_items) + items
        out.append(Option("continue", carry.target, served_map(params, new, mixed), n, _cost(facts, n), f))
    return out


def _route_options(params: Params, ws: Workspace, generation: int, facts: GalleryFacts) -> list[Option]:
    """The adapter and transform routes as measured (both bridges fitted and recorded) — their cost: the paired
    items both models embed, and for the transform every live row carried through the map."""
    from flows.upgrade.choose import choose_upgrade  # fits two bridges: only the budget policy asks

    choice = choose_upgrade(params, ws, generation=generation)
    pairs = choice.adapter.sample + choice.transform.sample
    carried = facts.items
    return [
        Option(
            "adapter",
            generation,
            choice.adapter.served.get("map"),
            pairs,
            _cost(facts, pairs),
            note=f"bridge v{choice.adapter.version}",
        ),
        Option(
            "transform",
            generation,
            choice.transform.served.get("map"),
            pairs,
            _cost(facts, pairs) + carried * choice.transform.us_per_query * 1e-6,
            note=f"bridge v{choice.transform.version}",
        ),
    ]


def _nights_since_backfill(store: LineageDB) -> int:
    """Nights since the gallery was last fully re-embedded (or carried by a transform): nights recorded after it."""
    nights = store.nights.all()
    done = [i for i, n in enumerate(nights) if n.action in ("full", "transform") and n.state == "done"]
    return len(nights) - (done[-1] + 1) if done else len(nights)
