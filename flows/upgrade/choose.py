"""Measure every upgrade route between two committed generations and take the one ``upgrade.route`` selects
(docs/design.md §11; the rule: :func:`flows.upgrade.route_rule.choose_route`).

``bctflow upgrade --generation G --route auto|compatible|backfill``: both bridges are fitted and recorded as
``--route adapter`` and ``--route transform`` fit them (:func:`flows.upgrade.bridge.fit_route`); the four routes'
served mAP comes from the same labelled-split galleries — compatible M(φ_G, φ_P), adapter M(bridge(φ_G), φ_P),
transform M(φ_G, bridge(φ_P)), backfill M(φ_G, φ_G) — and their gallery cost from measurements of this run: the
transform's map per item and the backfill's forward pass per item, timed the way ``bctflow backfill --plan`` times
it (G's checkpoint embedding ``backfill.plan_sample`` training items into a temporary folder, the rate after the
first batch). The choice's one line goes to the command's output, as tags to generation G's MLflow run, and to the
lineage (``route_choices``, with every route's measurement and the bar).

The bar of ``auto`` is ``upgrade.min_map``; left null it is "no worse than now" (:func:`route_bar`): the live
gallery's served mAP as the lineage records it (:func:`served_now`), printed first.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from components.errors import ConfigError
from flows.gallery.data import GallerySource, load_splits
from flows.gallery.pipeline import embed_gallery
from flows.params import Params
from flows.runtime.workspace import Workspace
from flows.upgrade.bridge import FittedRoute, fit_route, paired_positions
from flows.upgrade.route_rule import RouteChoice, RouteEvidence, check_route, choose_route
from registry.lineage import LineageDB
from registry.records import RouteChoiceRecord

__all__ = ["RouteBar", "UpgradeChoice", "choose_upgrade", "route_bar", "served_now"]


@dataclass(frozen=True)
class RouteBar:
    """The served mAP a route must reach (``value``; None: no bar — a route the user set, nothing recorded to
    compare with), the line the command prints first, and the words naming it in the choice's line (None: the
    rule's own, ``upgrade.min_map <value>``)."""

    value: float | None
    line: str
    words: str | None = None


@dataclass(frozen=True)
class UpgradeChoice:
    """The choice, the two bridges fitted to measure it, and the new model's embedding rate (items/s)."""

    choice: RouteChoice
    adapter: FittedRoute
    transform: FittedRoute
    forward_items_per_s: float
    bar: RouteBar


def _forward_rate(p: Params, ws: Workspace, checkpoint: str, generation: int) -> float:
    """Generation ``generation``'s embedding rate (items/s after the first batch) over ``backfill.plan_sample``
    training items, as the backfill's plan measures it."""
    train = load_splits(p, ws).train
    positions = paired_positions(len(train), p.backfill.plan_sample, p.upgrade.seed)
    with tempfile.TemporaryDirectory(prefix="bctflow-route-") as tmp:
        done = embed_gallery(p, GallerySource("train", train, 0), Path(checkpoint), Path(tmp) / "g",
                             generation=generation, positions=positions, crash_points=False)  # fmt: skip
    return done.items_per_s


def served_now(store: LineageDB) -> tuple[float, str] | None:
    """The live gallery's served mAP on the labelled split as the lineage records it, and whose queries on which
    gallery it measures. The queries are the production generation's when the live gallery accepts them as they are
    (its pointer's compatible generations), else the gallery's own generation's (a production model served through
    adapters has no mAP of its own there in the lineage). The number: the one the backfill that published the live
    version measured (its event's ``map``) when that backfill's target makes the queries; else the evaluation of
    those queries on the live gallery's generation. None without a live gallery or such a record."""
    ptr = store.live_pointer()
    if ptr is None:
        return None
    live = ptr.generation_id
    prod = store.production_generation_id()
    accepted = {int(g) for g in (ptr.compatible_generations or [live])}
    queries = prod if prod is not None and prod in accepted else live
    if ptr.backfill_id is not None:
        event = next((e for e in store.backfills() if e.id == ptr.backfill_id), None)
        if event is not None and event.to_generation_id == queries and event.metrics.get("map") is not None:
            f, t = event.from_generation_id, event.to_generation_id
            return float(event.metrics["map"]), f"g{t}'s queries after the {event.kind} backfill g{f}→g{t}"
    if queries != live and (v := store.metric_value(queries, live, "map")) is not None:
        return v, f"g{queries}'s queries on g{live}'s gallery"
    if (v := store.metric_value(live, live, "map")) is not None:
        return v, f"g{live} on its own gallery"
    return None


def route_bar(store: LineageDB, min_map: float | None, route: str = "auto") -> RouteBar:
    """``upgrade.min_map`` when set; else "no worse than now", the live gallery's served mAP (:func:`served_now`).
    ConfigError in one line for ``auto`` when the lineage records no such number (a route the user set goes
    without a bar)."""
    if min_map is not None:
        return RouteBar(min_map, f"bar: upgrade.min_map {min_map:.4f}")
    now = served_now(store)
    if now is None:
        if route != "auto":
            return RouteBar(None, "bar: none (upgrade.min_map is null and the lineage records no served mAP)")
        raise ConfigError(
            "upgrade.route auto with upgrade.min_map null takes the live gallery's served mAP as its bar, and the "
            "lineage records none (no live gallery, or no mAP of it); set upgrade.min_map"
        )
    value, what = now
    return RouteBar(
        value,
        f"bar: no worse than now (served mAP {value:.4f} of the live gallery, {what})",
        f"the bar {value:.4f} (no worse than now)",
    )


def choose_upgrade(params: Params, ws: Workspace, *, generation: int, parent: int | None = None,
                   route: str = "auto") -> UpgradeChoice:  # fmt: skip
    """Fit both bridges between ``generation`` and ``parent`` (default: its parent), measure the four routes and
    take the one ``route`` selects (``auto``: the cheapest reaching the bar, :func:`route_bar`); the line is tagged
    on the generation's MLflow run and the choice recorded in the lineage with the bar. ConfigError in one line,
    before any work, for a route that is not one or ``auto`` with no bar to take."""
    check_route(route)
    with ws.lineage(params, readonly=True) as store:
        bar = route_bar(store, params.upgrade.min_map, route)
    adapter = fit_route(params, ws, generation=generation, role="adapter", parent=parent)
    transform = fit_route(params, ws, generation=generation, role="transform", parent=parent)
    with ws.lineage(params, readonly=True) as store:
        new = store.generation(generation)
    rate = _forward_rate(params, ws, new.checkpoint_path, new.id)
    evidence = [
        RouteEvidence("compatible", adapter.cross.get("map"), 0.0),
        RouteEvidence("adapter", adapter.served["map"], 0.0, adapter.us_per_query),
        RouteEvidence("transform", transform.served["map"], transform.us_per_query * 1e-6),
        RouteEvidence("backfill", adapter.full["map"], 1.0 / max(rate, 1e-9)),
    ]
    choice = choose_route(evidence, items=adapter.gallery_items, min_map=bar.value, route=route, bar=bar.words)
    if new.mlflow_run_id is not None:
        client = ws.tracking(params).client()
        client.set_tag(new.mlflow_run_id, "bctflow.upgrade.route", choice.route)
        client.set_tag(new.mlflow_run_id, "bctflow.upgrade.route_line", choice.line[:5000])
    with ws.lineage(params) as store:
        record = RouteChoiceRecord(new.id, adapter.target, choice.route, route, bar.value,
                                   choice.met_bar, choice.line, [asdict(e) for e in evidence])  # fmt: skip
        store.record_route_choice(record)
    return UpgradeChoice(choice, adapter, transform, rate, bar)
