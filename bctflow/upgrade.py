"""``bctflow upgrade``: fit an upgrade route's bridge between two committed generations — a query adapter or a
gallery transform — measure what it serves, and record it in MLflow and the lineage (flows/upgrade/bridge.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bctflow.shell import HomeOpt, ParamsOpt, SetOpt, app, console, fail, parse_params
from components.errors import BctflowError
from flows.runtime.lock import UPGRADE, workspace_lock

if TYPE_CHECKING:
    from flows.upgrade.bridge import FittedRoute


@app.command()
def upgrade(
    generation: int = typer.Option(..., "--generation", help="the new generation the route serves"),
    route: str | None = typer.Option(
        None,
        "--route",
        help="adapter (fit the new generation's query map into the older gallery) | transform (fit the map of the "
        "older gallery's vectors into the new space) | auto (fit both, measure all four routes, take the cheapest "
        "reaching upgrade.min_map, or with it null the live gallery's served mAP: no worse than now) | compatible | "
        "backfill (measure all four, report that one); default upgrade.route",
    ),
    parent: int | None = typer.Option(
        None, "--from", help="the earlier generation it bridges to (default: the generation's parent)"
    ),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    overrides: list[str] | None = SetOpt,
) -> None:
    """Fit a bridge between a generation and an earlier one on a paired sample of the training split, measure the
    route on the labelled split, and record the map (MLflow model version, lineage bridge row); or measure every
    route and take the one upgrade.route selects."""
    from flows.runtime.workspace import Workspace, resolve_home
    from flows.upgrade.bridge import fit_route
    from flows.upgrade.choose import choose_upgrade
    from registry.lineage import ROLES

    h = resolve_home(home)
    p = parse_params(params, overrides)
    route = route or p.upgrade.route
    try:
        with workspace_lock(h, UPGRADE, p.lineage.db_url):
            if route not in ROLES:
                c = choose_upgrade(p, Workspace(h), generation=generation, parent=parent, route=route)
                console.print(c.bar.line)
                for r in (c.adapter, c.transform):
                    _print_bridge(r)
                console.print(c.choice.line)
                return
            r = fit_route(p, Workspace(h), generation=generation, role=route, parent=parent)
    except BctflowError as err:
        fail(err)
    _print_bridge(r)


def _print_bridge(r: FittedRoute) -> None:
    recovered = f", {r.recovered:.1%} of a full backfill's {r.full['map']:.4f}" if r.recovered is not None else ""
    if r.recovered_recall10 is not None:
        recovered += f"; CMC@10 {r.served['cmc@10']:.4f}, {r.recovered_recall10:.1%} of the full backfill's"
    console.print(
        f"{r.role} bridge g{r.source}→g{r.target} v{r.version} ({r.kind}, {r.sample} paired items: {r.sample_why}; "
        f"held-out error {r.fit_error:.4f}; MLflow version {r.mlflow_version}): served mAP {r.served['map']:.4f}"
        f"{recovered} (the old gallery alone {r.old['map']:.4f}); {r.us_per_query:.2f} µs per query; {r.path}; "
        f"{r.seconds:.1f} s"
    )
