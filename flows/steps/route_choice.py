"""Measure every upgrade route between two committed generations and take the one ``upgrade.route`` selects
(docs/design.md §11; the rule: :func:`flows.upgrade_route.choose_route`).

``bctflow upgrade --generation G --route auto|compatible|backfill``: both bridges are fitted and recorded as
``--route adapter`` and ``--route transform`` fit them (:func:`flows.steps.bridge_fit.fit_route`); the four routes'
served mAP comes from the same labelled-split galleries — compatible M(φ_G, φ_P), adapter M(bridge(φ_G), φ_P),
transform M(φ_G, bridge(φ_P)), backfill M(φ_G, φ_G) — and their gallery cost from measurements of this run: the
transform's map per item and the backfill's forward pass per item, timed the way ``bctflow backfill --plan`` times
it (G's checkpoint embedding ``backfill.plan_sample`` training items into a temporary folder, the rate after the
first batch). The choice's one line goes to the command's output, as tags to generation G's MLflow run, and to the
lineage (``route_choices``, with every route's measurement).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from flows.data import GallerySource, load_splits
from flows.params import Params
from flows.steps.bridge_fit import FittedRoute, fit_route, paired_positions
from flows.steps.gallery_pipeline import embed_gallery
from flows.upgrade_route import RouteChoice, RouteEvidence, check_route, choose_route
from flows.workspace import Workspace
from registry.records import RouteChoiceRecord

__all__ = ["UpgradeChoice", "choose_upgrade"]


@dataclass(frozen=True)
class UpgradeChoice:
    """The choice, the two bridges fitted to measure it, and the new model's embedding rate (items/s)."""

    choice: RouteChoice
    adapter: FittedRoute
    transform: FittedRoute
    forward_items_per_s: float


def _forward_rate(p: Params, ws: Workspace, checkpoint: str, generation: int) -> float:
    """Generation ``generation``'s embedding rate (items/s after the first batch) over ``backfill.plan_sample``
    training items, as the backfill's plan measures it."""
    train = load_splits(p, ws).train
    positions = paired_positions(len(train), p.backfill.plan_sample, 1.0, p.upgrade.seed)
    with tempfile.TemporaryDirectory(prefix="bctflow-route-") as tmp:
        done = embed_gallery(p, GallerySource("train", train, 0), Path(checkpoint), Path(tmp) / "g",
                             generation=generation, positions=positions, crash_points=False)  # fmt: skip
    return done.items_per_s


def choose_upgrade(params: Params, ws: Workspace, *, generation: int, parent: int | None = None,
                   route: str = "auto") -> UpgradeChoice:  # fmt: skip
    """Fit both bridges between ``generation`` and ``parent`` (default: its parent), measure the four routes and
    take the one ``route`` selects (``auto``: the cheapest reaching ``upgrade.min_map``); the line is tagged on the
    generation's MLflow run and the choice recorded in the lineage. ConfigError in one line, before any work, for a
    route that is not one or ``auto`` without ``upgrade.min_map``."""
    check_route(route, params.upgrade.min_map)
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
    choice = choose_route(evidence, items=adapter.gallery_items, min_map=params.upgrade.min_map, route=route)
    if new.mlflow_run_id is not None:
        client = ws.tracking(params).client()
        client.set_tag(new.mlflow_run_id, "bctflow.upgrade.route", choice.route)
        client.set_tag(new.mlflow_run_id, "bctflow.upgrade.route_line", choice.line[:5000])
    with ws.lineage(params) as store:
        record = RouteChoiceRecord(new.id, adapter.target, choice.route, route, params.upgrade.min_map,
                                   choice.met_bar, choice.line, [asdict(e) for e in evidence])  # fmt: skip
        store.record_route_choice(record)
    return UpgradeChoice(choice, adapter, transform, rate)
