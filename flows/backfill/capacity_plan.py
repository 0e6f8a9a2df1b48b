"""``bctflow backfill --plan --items N``: the capacity plan of a request — the committed rates, with this workspace's
own measurement over them where it has a live gallery (docs/scale.md).

* **No live gallery** (no workspace, or one without generations): every measured rate comes from the committed
  reports (:func:`flows.backfill.rates.committed_rates`), the rows' width from params (``model.embed_dim``,
  ``model.geometry``), the partial route's fraction from ``--fraction`` or the committed run's.
* **A live gallery**: the backfill the same options ask for is planned and its plan measured as ``--plan`` measures it
  (:func:`flows.backfill.forecast.forecast_backfill`: a sample of the very items, the target's model, this machine;
  nothing written); that rate replaces the committed one of its route and device (:func:`workspace_rates`), the
  width is the target generation's, and without ``--fraction`` the partial route re-embeds the smallest 10% step
  whose predicted served mAP reaches ``backfill.target_map`` (when it is set and reached).

Everything else — the index build, the transform or pairs not measured by this plan, the cited anchors — stays
committed or cited, each printed with its provenance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from components.geometry import create_space
from components.indexing.stores.faiss.files import index_config
from components.training.device import select_device
from flows.backfill.capacity import Capacity, check_request, project
from flows.backfill.rates import Rate, committed_rates, workspace_rates
from flows.params import Params, index_options
from flows.runtime.workspace import Workspace

if TYPE_CHECKING:
    from flows.backfill.make import BackfillRequest

__all__ = ["capacity_plan"]


def capacity_plan(
    params: Params,
    ws: Workspace,
    items: int,
    request: BackfillRequest | None = None,
    *,
    workers: int = 1,
    device: str = "cpu",
    started: float | None = None,
) -> tuple[Capacity, str]:
    """(the capacity plan for ``items``, a line saying where its measured rates come from). ``request``: what
    ``bctflow backfill`` asks for (default: a full backfill to the newest generation). ConfigError in one line for
    ``items`` / ``workers`` below 1 or a fraction outside (0, 1]. Writes nothing."""
    from flows.backfill.make import BackfillRequest  # the plan's machinery, imported where a plan is made

    request = request or BackfillRequest()
    fraction = request.fraction
    check_request(items, workers, fraction)
    rates: dict[str, Rate] = committed_rates()
    with ws.lineage(params, readonly=True) as store:
        live = store.live_pointer()
    geometry, dim = params.model.geometry, params.model.embed_dim
    chosen, why = (fraction, "--fraction") if fraction < 1.0 else (None, "")
    if live is None:
        where = f"no live gallery in {ws.home}: every measured rate is a committed report's"
    else:
        from flows.backfill.forecast import forecast_backfill

        plan = request.plan(params, ws)
        fc = forecast_backfill(plan, started)
        measured_on = select_device(params.train.device).type
        rates |= workspace_rates(plan, fc, measured_on)
        with ws.lineage(params, readonly=True) as store:
            g = store.generation(plan.target)
        geometry, dim = g.geometry, g.embed_dim
        if chosen is None and fc.reaches is not None:
            chosen = fc.reaches
            why = f"the smallest 10% step predicted to reach backfill.target_map {fc.target_map:g} in this workspace"
        what = "carrying rate" if plan.bridge is not None else f"{measured_on} embedding rate"
        where = f"the {what} measured now in {ws.home} (generation {plan.target}); the other rates committed"
    config = index_config(index_options(params))
    space = create_space(geometry)
    cap = project(items, rates, index=config, width=config.stored_width(space, space.point_width(dim)),
                  map_width=dim, paired_fraction=params.upgrade.paired_fraction, workers=workers, device=device,
                  fraction=chosen, fraction_why=why)  # fmt: skip
    return cap, where
