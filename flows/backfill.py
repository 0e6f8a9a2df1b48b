"""The ``backfill`` flow: plan → embed chunks (resumable) → publish + verify → switch the live gallery.

Each task calls one step of :mod:`flows.steps.reembed`. Killing the
process at any point and running the flow again finishes the same backfill
from the chunks already on disk; the live gallery keeps answering queries from
the old index until the final, atomic switch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.lock import workspace_lock
from flows.params import load_params_with
from flows.steps import reembed as bf
from flows.steps.context import store_for
from flows.progress import progress_bar
from flows.workspace import Workspace
from flows.transient import retry_condition


@task(name="plan-backfill", cache_policy=NO_CACHE)
def plan_task(home: str, params_path: str, overrides: list[str], target: int | None, fraction: float, order: str | None, seed: int, force: bool) -> bf.BackfillPlan:
    params = load_params_with(params_path, overrides)
    ws = Workspace(home)
    store = store_for(params, ws)
    try:
        plan = bf.plan_backfill(params, ws, store, target=target, fraction=fraction, order=order, seed=seed, force=force)
    finally:
        store.close()
    get_run_logger().info(
        "backfill with generation %d: %s, %d items in %d chunks%s", plan.target, plan.kind, len(plan.positions), plan.n_chunks,
        f", order {plan.order}" if plan.kind == "partial" else "",
    )
    return plan


@task(name="embed-chunks", cache_policy=NO_CACHE)
def embed_task(plan: bf.BackfillPlan) -> tuple[int, int]:
    log = get_run_logger()

    with progress_bar(f"backfill with g{plan.target}: chunks", plan.n_chunks) as advance:

        def on_chunk(i: int, n: int, resumed: bool) -> None:
            advance(1)
            if not resumed and ((i + 1) % max(1, n // 10) == 0 or i + 1 == n):
                log.info("chunk %d/%d embedded", i + 1, n)

        before, total = bf.embed_chunks(plan, on_chunk)
    if before:
        log.info("resumed: %d of %d chunks were already embedded by an earlier run", before, total)
    return before, total


@task(name="publish-index", cache_policy=NO_CACHE)
def publish_task(plan: bf.BackfillPlan) -> tuple[str, dict[str, float]]:
    index_dir, metrics = bf.publish(plan)
    get_run_logger().info("new index %s verified; target's retrieval on it: %s", index_dir, metrics)
    return str(index_dir), metrics


@task(name="switch-live-gallery", cache_policy=NO_CACHE, retries=3, retry_delay_seconds=2, retry_condition_fn=retry_condition)
def switch_task(plan: bf.BackfillPlan, index_dir: str, metrics: dict[str, float]) -> int:
    event = bf.switch(plan, Path(index_dir), metrics)
    get_run_logger().info("live gallery switched to generation %d (backfill %d)", plan.target, event)
    return event


@flow(name="backfill", log_prints=True)
def backfill(
    home: str,
    params_path: str = "params.yaml",
    overrides: list[str] | None = None,
    generation: int | None = None,
    fraction: float = 1.0,
    order: str | None = None,
    seed: int = 0,
    force: bool = False,
) -> dict[str, Any]:
    """Re-embed (a fraction of) the live gallery with ``generation`` (default: the production generation)."""
    with workspace_lock(Path(home), "a backfill is running"):
        return _backfill(home, params_path, overrides, generation, fraction, order, seed, force)


def _backfill(home: str, params_path: str, overrides: list[str] | None, generation: int | None, fraction: float, order: str | None, seed: int, force: bool) -> dict[str, Any]:
    plan = plan_task(home, params_path, list(overrides or []), generation, fraction, order, seed, force)
    before, total = embed_task(plan)
    index_dir, metrics = publish_task(plan)
    event = switch_task(plan, index_dir, metrics)
    summary = {"event": event, "target": plan.target, "kind": plan.kind, "reembedded": len(plan.positions), "chunks_resumed": before,
               "chunks": total, "metrics": metrics, "index": index_dir}
    lines = [f"# backfill {event}: generation {plan.target} ({plan.kind})", "", f"- items re-embedded: {len(plan.positions)}",
             f"- chunks resumed from an earlier run: {before} of {total}", f"- index: `{index_dir}`", f"- retrieval: {metrics}"]
    create_markdown_artifact("\n".join(lines) + "\n", key=f"backfill-{event}", description="bctflow backfill")
    return summary
