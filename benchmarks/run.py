"""`bctflow bench`: run every method of a profile on one scenario and write its report."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.grid import describe, train_grid
from benchmarks.partial_backfill import run_partial_backfill, write_partial_report
from benchmarks.profile import Profile, load_profile
from benchmarks.records import RecordStore
from benchmarks.report import write_table_report
from benchmarks.report_sequential import write_sequential_report
from benchmarks.runner import Bench
from benchmarks.scenario_names import ALL_SCENARIOS
from benchmarks.scenarios import make_scenario, run_table
from benchmarks.selection import RULE_TEXT
from benchmarks.sequential import run_sequential
from components.errors import ConfigError
from components.training.device import select_device
from flows.params import Params, apply_overrides
from flows.runtime import Workspace, describe_run

__all__ = ["ALL_SCENARIOS", "run_benchmark", "run_routes_benchmark"]


def _select(prof: Profile, bench_set: list[str], methods: str | None) -> Profile:
    """The profile with ``--bench-set KEY=VALUE`` settings and a ``--methods`` subset applied."""
    raw = prof.bench.model_dump()
    for item in bench_set:
        if "=" not in item:
            raise ConfigError(f"--bench-set {item!r} is not KEY=VALUE")
        k, v = item.split("=", 1)
        if k not in raw:
            raise ConfigError(f"--bench-set: unknown benchmark setting {k!r}; see benchmarks/profile.py BenchSettings")
        raw[k] = yaml.safe_load(v)
    if methods:
        wanted = [m.strip() for m in methods.split(",") if m.strip()]
        known = {m["name"] for m in raw["methods"]}
        missing = [m for m in wanted if m not in known]
        if missing:
            raise ConfigError(f"--methods {missing} are not in profile {prof.name!r} (it has {sorted(known)})")
        raw["methods"] = [m for m in raw["methods"] if m["name"] in wanted]
        raw["sequential_methods"] = [m for m in raw["sequential_methods"] if m == "independent" or m in wanted]
    return prof.model_copy(update={"bench": type(prof.bench).model_validate(raw)})


def _context(prof: Profile, p: Params, b: Bench, command: str) -> dict[str, Any]:
    """What the report's header says about the run, with where its numbers come from (``provenance``:
    :func:`flows.runtime.provenance.describe_run`)."""
    return {
        "command": command,
        "profile": prof.name,
        "profile_description": " ".join(prof.description.split()),
        "dataset": f"{p.data.dataset} ({b.num_classes} classes, {b.train.image_shape[0]}x{b.train.image_shape[1]})",
        "n_train": len(b.train),
        "n_val": len(b.val),
        "n_test": len(b.test),
        "val_fraction": prof.bench.validation_fraction,
        "machine": f"{os.cpu_count()} CPU cores, device {select_device(p.train.device)}",
        "seeds": prof.bench.seeds,
        "epochs": {"default": p.train.epochs, **prof.bench.scenario_epochs},
        "tune_weights": prof.bench.tune_weights,
        "p_up_floor": prof.bench.p_up_floor,
        "train_criterion": prof.bench.train_criterion,
        "criterion_roles": prof.bench.criterion_roles,
        "selection_rule": RULE_TEXT.format(floor=prof.bench.p_up_floor),
        "date": datetime.date.today().isoformat(),
        "provenance": describe_run(),
    }


def _load(
    profile: str, params_path: Path, overrides: list[str] | None, bench_set: list[str] | None, methods: str | None
) -> tuple[Profile, Params]:
    """The profile (with ``--bench-set`` and a ``--methods`` subset) and its params (with ``--set`` overrides)."""
    prof, p = load_profile(profile, params_path)
    if overrides:
        p = apply_overrides(p, overrides)
    if bench_set or methods:
        prof = _select(prof, bench_set or [], methods)
    return prof, p


def run_benchmark(
    profile: str,
    scenario: str,
    *,
    out: Path,
    home: Path,
    params_path: Path,
    command: str,
    tag: str | None = None,
    overrides: list[str] | None = None,
    bench_set: list[str] | None = None,
    methods: str | None = None,
    workers: int = 0,
    scheduler: str | None = None,
    log: Callable[[str], None] = print,
) -> tuple[Path, float]:
    """Run ``scenario`` under ``profile``; returns (the report's markdown file, wall seconds).

    ``workers`` > 1: the method table's models are trained on a Dask LocalCluster of that many worker processes first,
    ``scheduler``: on the Dask cluster at that address (benchmarks/grid.py); then the table is made as in a sequential
    run, from the model cache.
    """
    grid = workers > 1 or bool(scheduler)
    if grid and scenario in ("sequential", "partial_backfill"):
        raise ConfigError(f"--workers / --scheduler run the method-table scenarios; {scenario} runs sequentially")
    if scheduler and workers > 1:
        raise ConfigError("--workers sizes a local cluster; with --scheduler the cluster's own workers train")
    prof, p = _load(profile, params_path, overrides, bench_set, methods)
    if scenario not in ALL_SCENARIOS:
        raise ConfigError(f"unknown scenario {scenario!r}; use one of {', '.join(ALL_SCENARIOS)}")
    folder = out / prof.name / (scenario + (f"-{tag}" if tag else ""))
    t0 = time.perf_counter()
    # the new models' evaluation records, kept beside the tables: a run on another machine trains none of them again
    records = RecordStore(out / prof.name / "records")
    b = Bench(prof, p, home / "bench-cache" / prof.name, Workspace(home).datasets_dir(p), log=log, records=records)
    ctx = _context(prof, p, b, command) | {"execution": describe(workers, scheduler)}
    if scenario == "partial_backfill":
        curve = run_partial_backfill(b)
        ctx["wall_seconds"] = time.perf_counter() - t0
        return write_partial_report(curve, ctx, folder), ctx["wall_seconds"]
    if scenario == "sequential":
        res = run_sequential(b)
        ctx["wall_seconds"] = time.perf_counter() - t0
        return write_sequential_report(res, ctx, folder), ctx["wall_seconds"]
    sc = make_scenario(b, scenario)
    if grid:
        counts = train_grid(b, sc, workers=workers, scheduler=scheduler, log=log)
        ctx["execution"] += (
            f"; the cluster trained {counts['trained']} models ({counts['cached']} more were in the cache), "
            f"done {time.perf_counter() - t0:.0f} s into the run"
        )
    result = run_table(b, sc)
    ctx["wall_seconds"] = time.perf_counter() - t0
    return write_table_report(result, ctx, folder), ctx["wall_seconds"]


def run_routes_benchmark(
    profile: str,
    scenario: str,
    *,
    out: Path,
    home: Path,
    params_path: Path,
    command: str,
    overrides: list[str] | None = None,
    bench_set: list[str] | None = None,
    log: Callable[[str], None] = print,
) -> tuple[Path, float]:
    """`bctflow bench routes`: every upgrade route on ``scenario`` (benchmarks/routes.py); the report goes to
    ``out/<profile>/routes-<scenario>/``. Returns (report.md, wall seconds)."""
    from benchmarks.routes import run_routes
    from benchmarks.routes_report import write_routes_report

    prof, p = _load(profile, params_path, overrides, bench_set, None)
    t0 = time.perf_counter()
    b = Bench(prof, p, home / "bench-cache" / prof.name, Workspace(home).datasets_dir(p), log=log)
    ctx = _context(prof, p, b, command)
    res = run_routes(b, scenario)
    ctx["wall_seconds"] = time.perf_counter() - t0
    return write_routes_report(res, ctx, out / prof.name / f"routes-{scenario}"), ctx["wall_seconds"]
