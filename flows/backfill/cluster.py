"""A backfill's embedding on a Dask cluster, through Prefect's own Dask integration (docs/design.md §7.6).

Params ``backfill.cluster`` / ``workers`` / ``threads`` / ``chunks_per_task`` choose where the chunks run:

* ``cluster: local`` with ``workers: null`` (the default) — the command's own process, as before;
* ``cluster: local`` with ``workers: N`` — a ``distributed.LocalCluster`` of N worker processes on this machine
  (loopback only, no dashboard), each embedding with ``threads`` torch threads;
* ``cluster: tcp://host:8786`` — the scheduler of an existing cluster (``dask scheduler`` + ``dask worker``s that can
  read the workspace and the corpus at the same paths).

The chunks still to write (:func:`~flows.gallery.pipeline.chunk_runs`: part k holds chunk k of the selected
items, so a finished part is a finished chunk whoever wrote it) are cut into runs of at most ``chunks_per_task``
parts — fewer where the gallery is small, so that each worker gets about :data:`RUNS_PER_WORKER` runs (two workers
given 8 and 5 of 13 chunks would finish at the pace of the 8) — and each run is one Prefect task run on the
cluster (``embed-chunks``, named by gallery and parts, its log naming the worker): prefect-dask's
:class:`~prefect_dask.DaskTaskRunner` submits it, so it shows in the flow run with its worker. A worker loads the
model once (checked against the sha256 the backfill planned with) and writes its parts atomically beside the others';
the flow writes ``store.json`` when every run has answered. Its embedding rate (the backfill's log line) counts from
the moment each worker has answered one run — the cluster's start-up (workers loading the model, their first
chunks) behind it, as the in-process rate counts from the first batch: counting from the first run alone would put
the other workers' first chunks in the items but not in the seconds.

Failures: a worker that dies mid-run (a kill, an OOM) has its run rescheduled by the scheduler on another worker,
which rewrites the same parts (same names, same items): one row per item. A killed command leaves finished parts;
the same command resumes from them, losing at most the run each worker was writing (its unfinished part). A worker
that cannot load the model or read the corpus fails the backfill with one line naming it and the cause; nothing is
published, the live gallery is unchanged.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed

from components.errors import BctflowError
from components.io import file_sha256
from flows.backfill.plan import BackfillGallery, BackfillPlan
from flows.backfill.reembedding import gallery_model_checkpoint, gallery_source, select_items
from flows.gallery.pipeline import ChunkRun, Embedded, chunk_runs, embed_run, finish_parts

__all__ = ["RUNS_PER_WORKER", "ClusterError", "embed_on_cluster", "parts_per_run"]

#: task runs per worker a gallery's chunks are cut into, at least (where ``chunks_per_task`` allows): the workers
#: finish together to within one run
RUNS_PER_WORKER = 4


class ClusterError(BctflowError):
    """A worker of the cluster could not embed its chunks (one line: the worker and the cause)."""


def _worker() -> str:
    """The Dask worker this runs on (its address), or this process."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return f"process {socket.gethostname()}"


@contextlib.contextmanager
def _named(what: str) -> Iterator[None]:
    """Any failure inside becomes one line naming the worker, what it was doing and the cause."""
    try:
        yield
    except Exception as err:
        cause = f"{type(err).__name__}: {err}".splitlines()[0]
        raise ClusterError(
            f"worker {_worker()} could not embed {what} ({cause}); nothing was published and the live gallery is "
            "unchanged: fix it and run the same command (finished chunks are kept)"
        ) from None


def parts_per_run(parts: int, workers: int, chunks_per_task: int) -> int:
    """Parts per task run for a gallery of ``parts`` parts on ``workers`` workers: at most ``chunks_per_task``, and
    few enough that every worker gets about :data:`RUNS_PER_WORKER` runs (at least one part)."""
    return max(1, min(chunks_per_task, parts // (RUNS_PER_WORKER * max(1, workers))))


def _workers(plan: BackfillPlan) -> int:
    """The cluster's worker count: ``backfill.workers`` of a LocalCluster, or what the scheduler reports now."""
    b = plan.params.backfill
    if b.cluster == "local":
        return b.workers or 1
    from prefect.context import FlowRunContext

    runner = FlowRunContext.get().task_runner  # this flow's DaskTaskRunner: its client connects on first use
    return max(1, len(runner.client.scheduler_info()["workers"]))


@task(name="embed-chunks", cache_policy=NO_CACHE)
def embed_chunks(plan: BackfillPlan, gallery: BackfillGallery, run: ChunkRun, sha256: str) -> int:
    """Embed one run of chunks on the worker this runs on. Returns the items embedded."""
    import torch

    parts = run.part_range(plan.chunk_size)
    what = f"parts {parts.start}–{parts.stop - 1} of the {gallery.name} gallery"
    with _named(what):
        torch.set_num_threads(plan.params.backfill.threads)
        n = embed_run(
            plan.params,
            gallery_source(plan, gallery),
            gallery_model_checkpoint(plan),
            plan.work_version.store(gallery.corpus),
            run,
            generation=plan.target,
            sha256=sha256,
            loader_workers=0,  # the worker decodes in its own process: the cluster's processes are the parallelism
            throttle=plan.throttle_s,
        )
    get_run_logger().info("%s: %d items on worker %s", what, n, _worker())
    return n


@flow(name="embed-on-cluster")
def embed_on_cluster(plan: BackfillPlan) -> list[tuple[BackfillGallery, Embedded]]:
    """Every gallery's selected items embedded into parts by the cluster's workers (resumed: finished parts are
    kept), then each store finished here. Run with ``.with_options(task_runner=task_runner(p))``."""
    import time

    checkpoint = gallery_model_checkpoint(plan)
    sha256 = file_sha256(checkpoint)
    workers = _workers(plan)
    done = []
    for gallery in plan.galleries:
        t0 = time.perf_counter()
        source, out = gallery_source(plan, gallery), plan.work_version.store(gallery.corpus)
        selected = select_items(plan, gallery)
        per_run = parts_per_run(-(-len(selected) // plan.chunk_size), workers, plan.params.backfill.chunks_per_task)
        runs, resumed = chunk_runs(plan.params, source, checkpoint, out, selected, per_run)
        futures = []
        for r in runs:
            parts = r.part_range(plan.chunk_size)
            name = f"embed-{gallery.name}-parts-{parts.start}-{parts.stop - 1}"
            futures.append(embed_chunks.with_options(task_run_name=name).submit(plan, gallery, r, sha256))
        items, startup, first, answered = 0, 0.0, 0, 0
        warm = min(workers, len(runs))  # the start-up is behind once each worker has answered a run
        for future in as_completed(futures):
            n = future.result()  # a ClusterError: one line, raised here
            items, answered = items + n, answered + 1
            if answered == warm:  # every worker has loaded the model and embedded a run: the rate counts from here
                startup, first = time.perf_counter() - t0, items
        store = finish_parts(plan.params, Path(out))
        seconds = time.perf_counter() - t0
        done.append((gallery, Embedded.of(store, items, seconds, resumed, startup, first)))
    return done
