"""The ``backfill`` flow: start (or resume) → embed chunks → publish + verify → switch the live gallery.

The flow takes the run's one :class:`~flows.steps.reembed.BackfillPlan` (made by
:func:`~flows.steps.reembed.plan_backfill` from params parsed once) and runs
each step of :mod:`flows.steps.reembed` as a task. Killing the process at any
point and running the same command again finishes the same backfill from the
chunks already on disk; the live gallery keeps answering queries from the old
index until the final, atomic switch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.lock import workspace_lock
from flows.progress import progress_bar
from flows.steps import publish, reembed, reembed_corpus
from flows.steps.reembed import BackfillPlan
from flows.transient import retry_condition


@task(name="start-backfill", cache_policy=NO_CACHE)
def start_task(plan: BackfillPlan) -> BackfillPlan:
    plan = reembed.start(plan)
    get_run_logger().info(
        "backfill with generation %d: %s, %d items in %d chunks%s",
        plan.target,
        plan.kind,
        len(plan.positions),
        plan.n_chunks,
        f", order {plan.order}" if plan.kind == "partial" else "",
    )
    return plan


@task(name="embed-chunks", cache_policy=NO_CACHE)
def embed_task(plan: BackfillPlan) -> tuple[int, int]:
    log = get_run_logger()

    with progress_bar(f"backfill with g{plan.target}: chunks", plan.n_chunks) as advance:

        def on_chunk(i: int, n: int, resumed: bool) -> None:
            advance(1)
            if not resumed and ((i + 1) % max(1, n // 10) == 0 or i + 1 == n):
                log.info("chunk %d/%d embedded", i + 1, n)

        before, total = reembed.embed_chunks(plan, on_chunk)
    if before:
        log.info("resumed: %d of %d chunks were already embedded by an earlier run", before, total)
    selected = reembed_corpus.corpus_selection(plan)
    if selected is not None:
        t0 = time.perf_counter()
        with progress_bar(f"backfill with g{plan.target}: gallery corpus (items)", len(selected)) as advance:
            now, n = reembed_corpus.embed_corpus_chunks(plan, advance)
        rate = now / max(time.perf_counter() - t0, 1e-9)
        log.info(
            "gallery corpus: %d of %d selected items embedded now (%d by an earlier run) at %.0f items/s",
            now,
            n,
            n - now,
            rate,
        )
    return before, total


@task(name="publish-index", cache_policy=NO_CACHE)
def publish_task(plan: BackfillPlan) -> tuple[str, dict[str, float]]:
    index_dir, metrics = publish.publish(plan)
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
    event = publish.switch(plan, Path(index_dir), metrics)
    get_run_logger().info("live gallery switched to generation %d (backfill %d)", plan.target, event)
    return event


@flow(name="backfill", log_prints=True)
def backfill(plan: BackfillPlan) -> dict[str, Any]:
    """Re-embed (a fraction of) the live gallery with the plan's target generation."""
    with workspace_lock(plan.workspace.home, "a backfill is running", plan.params.lineage.db_url):
        plan = start_task(plan)
        before, total = embed_task(plan)
        index_dir, metrics = publish_task(plan)
        event = switch_task(plan, index_dir, metrics)
    summary = {
        "event": event,
        "target": plan.target,
        "kind": plan.kind,
        "reembedded": len(plan.positions),
        "chunks_resumed": before,
        "chunks": total,
        "metrics": metrics,
        "index": index_dir,
    }
    lines = [
        f"# backfill {event}: generation {plan.target} ({plan.kind})",
        "",
        f"- items re-embedded: {len(plan.positions)}",
        f"- chunks resumed from an earlier run: {before} of {total}",
        f"- index: `{index_dir}`",
        f"- retrieval: {metrics}",
    ]
    create_markdown_artifact("\n".join(lines) + "\n", key=f"backfill-{event}", description="bctflow backfill")
    return summary
