"""The method table's models trained on a Dask cluster (docs/design.md §6.8), into the benchmark's model cache.

:func:`train_grid` trains every model :func:`benchmarks.scenarios.run_table` needs and returns once they are all in
the content-addressed cache; ``run_table`` then runs as it always does and finds each of them there, so the table is
the sequential run's by construction. The cells come from the scenario's own functions, called with a
:class:`_Planner` in place of the :class:`~benchmarks.runner.Bench`: each ``train_model`` call becomes a task keyed by
the model's cache key (submitted once; a model already in the cache is not submitted), that starts after the tasks of
the models it starts from (its old model and φ*).

Two waves. The first holds every model known before anything is trained: seed 0's old models and φ* of every head,
every configuration (head × λ × options grid) of every trained method at seed 0, and of the further seeds whatever
does not wait on seed 0's results (the old models and φ* of a geometry with one head; a method's new model when it
has one configuration). The second, after the first, holds the rest of the further seeds: their configuration and
``best_baseline`` are chosen on the validation split from seed 0's models (:func:`~benchmarks.scenarios.seed0_choices`,
the same code ``run_table`` runs).
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.profile import Profile
from benchmarks.records import RecordStore
from benchmarks.runner import Bench, ModelRef, ModelRequest
from benchmarks.scenarios import (
    SIMPLEX,
    Scenario,
    base_models,
    best_baseline,
    entry_configs,
    extra_seed_names,
    extra_seed_plan,
    seed0_base_models,
    seed0_choices,
    selections,
    simplex_seed_plan,
    train_entry,
)
from components.errors import ConfigError
from components.geometry import Euclidean
from components.training import TrainingDivergedError
from flows.params import Params

__all__ = ["describe", "local_threads", "train_grid"]


def local_threads(workers: int) -> int:
    """torch threads of each of ``workers`` local worker processes: this machine's cores shared out."""
    return max(1, (os.cpu_count() or 1) // workers)


def describe(workers: int, scheduler: str | None) -> str:
    """How a benchmark runs, for its report's header."""
    if scheduler:
        return f"Dask cluster at {scheduler} (each model on one worker task, torch threads = its cores ÷ task slots)"
    if workers > 1:
        return f"Dask LocalCluster, {workers} worker processes × 1 task, {local_threads(workers)} torch thread(s) each"
    import torch

    return f"sequential (one process, {torch.get_num_threads()} torch threads)"


@dataclass(frozen=True)
class _BenchArgs:
    """What a worker process builds its own Bench from (the cache and data paths must be visible to it)."""

    profile: Profile
    params: Params
    out_dir: Path
    datasets_dir: Path
    records: Path | None


_WORKER_BENCH: list[tuple[_BenchArgs, Bench]] = []  # a worker process's Bench, built on its first task


def _worker_bench(args: _BenchArgs) -> Bench:
    if not _WORKER_BENCH or _WORKER_BENCH[0][0] != args:
        records = RecordStore(args.records) if args.records is not None else None
        bench = Bench(args.profile, args.params, args.out_dir, args.datasets_dir, log=lambda _m: None, records=records)
        _WORKER_BENCH[:] = [(args, bench)]
    return _WORKER_BENCH[0][1]


def _train_task(
    args: _BenchArgs, label: str, req: ModelRequest, after: list[Any], threads: int | None, record: bool
) -> dict[str, Any]:
    """On a worker: train one model into the cache (``after``: the results of the tasks it waits for, unused); a new
    model of a method (``record``) is measured against its old model and φ* too, and its record kept."""
    import torch
    from distributed import get_worker

    worker = get_worker()
    torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // worker.state.nthreads))
    t0 = time.perf_counter()
    bench = _worker_bench(args)
    try:
        key, diverged = (bench.record(label, req) if record else bench.train_model(label, req)).key, None
    except TrainingDivergedError as err:  # recorded in the cache; the table leaves the configuration out
        key, diverged = bench.model_ref(label, req).key, str(err)
    return {
        "key": key,
        "label": label,
        "seconds": time.perf_counter() - t0,
        "worker": worker.name,
        "diverged": diverged,
    }


class _Planner:
    """Stands in for a Bench in the scenario's functions (it has what they use: ``settings``, ``params``, ``log``,
    ``train_model``, ``record``): ``train_model`` / ``record`` submit the model's training (and a new model's
    evaluation) to the cluster (once per cache key, after the tasks of its old model and φ*) and return its
    :class:`ModelRef`; a model already in the cache, or a new model with a kept record, is not submitted."""

    def __init__(self, bench: Bench, client: Any, threads: int | None, log: Callable[[str], None]) -> None:
        self.bench, self.settings, self.params = bench, bench.settings, bench.params
        self.client, self.threads, self._log = client, threads, log
        records = bench.records.folder.resolve() if bench.records is not None else None
        self.args = _BenchArgs(
            bench.profile, bench.params, bench.out_dir.resolve(), bench.datasets_dir.resolve(), records
        )
        self.futures: dict[str, Any] = {}
        self.done: set[str] = set()
        self.cached: set[str] = set()

    def log(self, message: str) -> None:
        """The scenario functions' progress lines: nothing is trained here, so they are dropped."""

    def train_model(self, label: str, req: ModelRequest) -> ModelRef:
        return self._submit(label, req, record=False)

    def record(self, label: str, req: ModelRequest) -> ModelRef:
        return self._submit(label, req, record=True)

    def _submit(self, label: str, req: ModelRequest, *, record: bool) -> ModelRef:
        ref = self.bench.model_ref(label, req)
        if ref.key in self.futures or ref.key in self.cached:
            return ref
        records = self.bench.records
        if record and records is not None and req.old is not None and req.reference is not None:
            done = records.get(ref.key, req.old.key, req.reference.key) is not None
        else:
            done = self.bench.is_cached(ref.key)
        if done:
            self.cached.add(ref.key)
            return ref
        parents = (req.old, req.reference)
        after = [self.futures[m.key] for m in parents if m is not None and m.key in self.futures]
        self.futures[ref.key] = self.client.submit(
            _train_task, self.args, label, req, after, self.threads, record, key=f"bench-model-{ref.key}"
        )
        return ref

    def training_summary(self, ref: ModelRef) -> dict[str, float]:
        """What ``ref``'s training reached (:meth:`Bench.training_summary`), once its task (if submitted) is done:
        the train criterion judges an old model or φ* before the models trained against it are submitted."""
        future = self.futures.get(ref.key)
        if future is not None and ref.key not in self.done:
            self._finished(future.result(), future.key)
        return self.bench.training_summary(ref)

    def _finished(self, res: dict[str, Any], task_key: str) -> None:
        if f"bench-model-{res['key']}" != task_key:
            raise ConfigError(
                f"a worker trained {res['label']} under cache key {res['key']}, this process expected "
                f"{task_key.removeprefix('bench-model-')}: the cluster's bctflow or params differ from this one's"
            )
        self.done.add(res["key"])
        what = f"diverged ({res['diverged']})" if res.get("diverged") else "trained"
        self._log(
            f"[grid] {len(self.done)}/{len(self.futures)} {what} {res['label']} in {res['seconds']:.0f} s "
            f"on worker {res['worker']}"
        )

    def wait(self, wave: str) -> None:
        """Wait for every submitted model (the first failure is raised; the finished ones stay in the cache)."""
        from distributed import as_completed

        pending = [f for k, f in self.futures.items() if k not in self.done]
        found = len(self.cached)
        self._log(f"[grid] {wave}: {len(pending)} models to train, {found} found in the cache or the records so far")
        for fut in as_completed(pending):
            self._finished(fut.result(), fut.key)


def _first_wave(plan: _Planner, sc: Scenario) -> None:
    """Submit every model that does not wait on seed 0's validation results."""
    s = plan.settings
    old_sel, new_sel = selections(plan.bench, sc)
    by_head = seed0_base_models(plan, sc, old_sel, new_sel)
    trained = [e for e in s.methods if e.method not in SIMPLEX]
    configs = {e.name: entry_configs(plan, e) for e in trained}
    for entry in trained:
        for cfg in configs[entry.name]:
            old, ref = by_head[entry.geometry][cfg.head.name]
            train_entry(plan, sc, entry, new_sel, plan.params, cfg, s.seeds[0], old, ref)
    # further seeds: a method with one head has its lineage (old model, φ*) known now, and its new model too when it
    # has one configuration; a best_baseline among several is not known, but its Euclidean lineage is (all share the
    # heads)
    one_head = {e.name: configs[e.name][0] for e in trained if len({c.head.name for c in configs[e.name]}) == 1}
    baselines = [e.name for e in trained if e.geometry == Euclidean.name]
    stand_in = baselines[0] if baselines else None
    named = extra_seed_names(s, None)
    for entry, cfg, seed in extra_seed_plan(s, one_head, stand_in):
        old, ref = base_models(plan, sc, old_sel, new_sel, seed, cfg.head)
        known = entry.name in named or len(baselines) == 1
        if known and len(configs[entry.name]) == 1:
            train_entry(plan, sc, entry, new_sel, plan.params, cfg, seed, old, ref)
    for _entry, head, seed in simplex_seed_plan(s, None):  # PSP / LSP: the first head's lineage at each seed
        base_models(plan, sc, old_sel, new_sel, seed, head)


def _second_wave(plan: _Planner, sc: Scenario) -> None:
    """Submit the further seeds' models in the configuration chosen on seed 0's (cached) models."""
    quiet = copy.copy(plan.bench)
    quiet.log = lambda _m: None
    old_sel, new_sel = selections(quiet, sc)
    chosen, val_p_com, _ = seed0_choices(quiet, sc, new_sel, seed0_base_models(quiet, sc, old_sel, new_sel))
    choices = {n: c.config for n, c in chosen.items()}
    for entry, cfg, seed in extra_seed_plan(plan.settings, choices, best_baseline(quiet, val_p_com)):
        old, ref = base_models(plan, sc, old_sel, new_sel, seed, cfg.head)
        train_entry(plan, sc, entry, new_sel, plan.params, cfg, seed, old, ref)


def _quiet_kill(record: logging.LogRecord) -> bool:
    """Drop the nanny's "Worker process still alive after 4.0 seconds, killing" at shutdown: a worker process that
    loaded torch and the data can take longer than that to exit on a busy machine; all it trained is in the cache."""
    return "still alive after" not in record.getMessage()


@contextmanager
def _client(workers: int, scheduler: str | None) -> Iterator[Any]:
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler) as client:
            yield client
        return
    logging.getLogger("distributed.nanny").addFilter(_quiet_kill)
    quiet = logging.getLogger("distributed")  # the scheduler's and nannies' INFO lines would bury the progress
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        with (
            LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, host="127.0.0.1"
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client
    finally:
        quiet.setLevel(level)


def train_grid(
    bench: Bench, sc: Scenario, *, workers: int, scheduler: str | None = None, log: Callable[[str], None] = print
) -> dict[str, int]:
    """Train every model of ``sc``'s method table on a Dask cluster (a LocalCluster of ``workers`` processes, or the
    one at ``scheduler``) into ``bench``'s cache. Returns how many models were trained and found cached."""
    with _client(workers, scheduler) as client:
        plan = _Planner(bench, client, None if scheduler else local_threads(workers), log)
        _first_wave(plan, sc)
        plan.wait("wave 1 (seed 0, and the further seeds' models known before training)")
        _second_wave(plan, sc)
        plan.wait("wave 2 (the further seeds at the λ / head chosen on seed 0)")
    return {"trained": len(plan.done), "cached": len(plan.cached)}
