"""The ``backfill`` flow: start (or resume) → embed parts → publish + verify → switch the live gallery.

The flow takes the run's one :class:`~flows.backfill.plan.BackfillPlan` (made by
:func:`~flows.backfill.make.plan_backfill` from params parsed once) and runs
each step of :mod:`flows.backfill.reembedding` and :mod:`flows.backfill.publishing` as a task.
Killing the process at any point and running the same command again finishes the
same backfill from the parts already on disk; the live gallery keeps answering
queries from the old version until the final, atomic switch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.backfill import make, publishing, reembedding
from flows.backfill.cluster import embed_on_cluster
from flows.backfill.forecast import BackfillForecast, forecast_backfill, forecast_lines, forecast_metrics, run_seconds
from flows.backfill.plan import BackfillGallery, BackfillPlan
from flows.backfill.task_runner import on_cluster, task_runner
from flows.gallery.pipeline import Embedded
from flows.runtime.lock import BACKFILL, workspace_lock
from flows.runtime.prefect_api import cluster_api
from flows.runtime.progress import progress_bar
from flows.runtime.transient import retry_condition

_WORDS = {"evaluation": "evaluation gallery", "corpus": "serving corpus"}


def _describe(plan: BackfillPlan) -> str:
    """The galleries and items a backfill re-embeds, in words."""
    return ", ".join(f"{_WORDS[g.name]} {g.selected} of {g.total} items" for g in plan.galleries)


@task(name="plan-backfill", cache_policy=NO_CACHE)
def forecast_task(plan: BackfillPlan, forecast: BackfillForecast | None) -> BackfillForecast:
    """The plan (flows/backfill/forecast.py), measured here unless the caller measured it, logged before anything
    is re-embedded."""
    forecast = forecast or forecast_backfill(plan)
    for line in forecast_lines(plan, forecast):
        get_run_logger().info("%s", line)
    return forecast


@task(name="start-backfill", cache_policy=NO_CACHE)
def start_task(plan: BackfillPlan) -> BackfillPlan:
    plan = make.start(plan)
    get_run_logger().info(
        "backfill with generation %d: %s, %s, %d parts of %d%s",
        plan.target,
        plan.kind,
        _describe(plan),
        plan.n_parts,
        plan.chunk_size,
        f", order {plan.order}" if plan.kind == "partial" else "",
    )
    return plan


def _log_embedded(done: list[tuple[BackfillGallery, Embedded]]) -> tuple[int, int]:
    """One line per gallery: what its embedding did. Returns (parts resumed, parts in all)."""
    log = get_run_logger()
    for gallery, e in done:
        log.info(
            "%s: %d of %d selected items embedded now (%d by an earlier run) at %.0f items/s after %.1f s of start-up; "
            "%d of %d parts resumed",
            _WORDS[gallery.name],
            e.items,
            gallery.selected,
            gallery.selected - e.items,
            e.items_per_s,
            e.startup_s,
            e.parts_resumed,
            e.parts,
        )
    return sum(e.parts_resumed for _, e in done), sum(e.parts for _, e in done)


@task(name="embed-parts", cache_policy=NO_CACHE)
def embed_task(plan: BackfillPlan) -> tuple[int, int]:
    """Every gallery's selected items, embedded into parts in this process (resumed). Returns (parts resumed, parts
    in all)."""
    items = sum(g.selected for g in plan.galleries)
    doing = "embedding" if plan.bridge is None else f"carrying through bridge v{plan.bridge.version}"
    with progress_bar(f"backfill with g{plan.target}: {doing} (items)", items) as advance:
        return _log_embedded(reembedding.reembed(plan, advance))


def _embed(plan: BackfillPlan) -> tuple[int, int]:
    """The embedding step: in this process, or on the Dask cluster params ``backfill.cluster`` names
    (:mod:`flows.backfill.cluster`: a subflow whose chunk runs are task runs on the cluster)."""
    if plan.bridge is not None or not on_cluster(plan.params):  # a transform: matrix products, no cluster needed
        return embed_task(plan)
    runner = task_runner(plan.params)
    with cluster_api():
        return _log_embedded(embed_on_cluster.with_options(task_runner=runner)(plan))


@task(name="publish-index", cache_policy=NO_CACHE)
def publish_task(plan: BackfillPlan) -> tuple[str, dict[str, float]]:
    index_dir, metrics = publishing.publish(plan)
    get_run_logger().info("new index %s verified; target's retrieval on it: %s", index_dir, metrics)
    return str(index_dir), metrics


@task(
    name="switch-live-gallery",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=2,
    retry_condition_fn=retry_condition,
)
def switch_task(plan: BackfillPlan, index_dir: str, metrics: dict[str, float]) -> int:
    event = publishing.switch(plan, Path(index_dir), metrics)
    get_run_logger().info("live gallery switched to generation %d (backfill %d)", plan.target, event)
    return event


@task(name="embed-some-parts", cache_policy=NO_CACHE)
def embed_some_task(plan: BackfillPlan, max_items: int) -> int:
    """At most ``max_items`` more of the selected items, then stop: the items still to embed."""
    with progress_bar(f"backfill with g{plan.target}: embedding at most {max_items} items", max_items) as advance:
        return reembedding.reembed_some(plan, max_items, advance)


@flow(name="backfill", log_prints=True)
def backfill(
    plan: BackfillPlan, forecast: BackfillForecast | None = None, max_items: int | None = None
) -> dict[str, Any]:
    """Re-embed (a fraction of) the live gallery with the plan's target generation; ``forecast``: its plan, when the
    caller measured it already (the CLI does, before its Prefect server starts). ``max_items``: embed at most that
    many more items this run; when items are left, stop before publishing (``{"paused": True, …}``): the same
    request resumes it (a re-embedding spread over several nights' budgets, docs/design.md §7.18)."""
    with workspace_lock(plan.workspace.home, BACKFILL, plan.params.lineage.db_url):
        forecast = forecast_task(plan, forecast)
        plan = start_task(plan)
        if max_items is not None and plan.bridge is None:
            left = embed_some_task(plan, max_items)
            if left:
                get_run_logger().info("backfill with g%d paused: %d items left for the next run", plan.target, left)
                return {"paused": True, "target": plan.target, "left": left, "kind": plan.event_kind}
        embedding = time.time()
        before, total = _embed(plan)
        embedded = time.time()
        index_dir, metrics = publish_task(plan)
        # the lineage keeps the prediction beside this run's seconds, which the next plan reads
        timed = run_seconds(plan, forecast, embedding, embedded)
        event = switch_task(plan, index_dir, metrics | forecast_metrics(forecast) | timed)
    summary = {
        "event": event,
        "target": plan.target,
        "kind": plan.event_kind,
        "reembedded": plan.evaluation.selected,
        "parts_resumed": before,
        "parts": total,
        "metrics": metrics,
        "plan": forecast_metrics(forecast),
        "index": index_dir,
    }
    lines = [
        f"# backfill {event}: {plan.reason()}",
        "",
        f"- items re-embedded: {_describe(plan)}",
        f"- parts resumed from an earlier run: {before} of {total}",
        f"- index: `{index_dir}`",
        f"- retrieval: {metrics}",
        "",
        "```",
        *forecast_lines(plan, forecast),
        "```",
    ]
    create_markdown_artifact("\n".join(lines) + "\n", key=f"backfill-{event}", description="bctflow backfill")
    return summary
