"""`bctflow bench`: the method table (the default), `routes`, `scale`, `transform` and `perf` — thin commands over
benchmarks/."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from bctflow.choices import IndexType, Scenario, complete_profile
from bctflow.shell import HomeOpt, ParamsOpt, SetOpt, announce_params, app, console, fail, parse_params
from components.errors import BctflowError, ConfigError
from flows.params import Params, apply_overrides
from flows.runtime.env import configure_environment

bench_app = typer.Typer(
    no_args_is_help=False,
    help="Benchmarks: the method table (default), `common-reference`, `budget`, `routes`, `scale`, `transform` and "
    "`perf`.",
)
app.add_typer(bench_app, name="bench")


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    profile: str = typer.Option(
        "cpu",
        "--profile",
        autocompletion=complete_profile,
        help="benchmark profile: a name of benchmarks/profiles/ (cpu, gpu, ...) or a YAML path",
    ),
    scenario: Scenario | None = typer.Option(None, "--scenario", help="the scenario of the method table"),
    out: Path = typer.Option(
        Path("benchmarks/results"), "--out", help="reports go to OUT/<profile>/<scenario>[-<tag>]/"
    ),
    tag: str | None = typer.Option(None, "--tag", help="suffix for the report folder (e.g. a harder variant)"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
    bench_set: list[str] | None = typer.Option(
        None,
        "--bench-set",
        metavar="KEY=VALUE",
        help="override a benchmark setting, e.g. --bench-set old_class_fraction=0.3 (repeatable)",
    ),
    methods: str | None = typer.Option(None, "--methods", help="comma-separated subset of the profile's methods"),
    workers: int = typer.Option(
        0,
        "--workers",
        min=0,
        help="train the table's independent models on a local Dask cluster of N worker processes (0 or 1: one "
        "process, one model after another)",
    ),
    scheduler: str | None = typer.Option(
        None, "--scheduler", help="train them on the Dask cluster at this scheduler address (e.g. tcp://host:8786)"
    ),
) -> None:
    """Run every method of a profile on one scenario and write a Table-1-style report (markdown + CSV + JSON)."""
    if ctx.invoked_subcommand is not None:
        return
    if scenario is None:
        fail(BctflowError("bctflow bench needs --scenario (the method table) or a subcommand: bctflow bench scale"))
    from benchmarks.run import run_benchmark

    _report(run_benchmark, profile, scenario, out, home, params, set_, bench_set,
            tag=tag, methods=methods, workers=workers, scheduler=scheduler)  # fmt: skip


def _report(run: Any, profile: str, scenario: str, out: Path, home: Path | None, params: Path,
            set_: list[str] | None, bench_set: list[str] | None, **extra: Any) -> None:  # fmt: skip
    """Run a benchmark (``run``: benchmarks/run.py) in the workspace ``home`` and print where its report went (one
    line on a refusal)."""
    from flows.runtime.workspace import resolve_home

    announce_params(params)
    h = resolve_home(home)
    configure_environment(h)
    try:
        md, seconds = run(
            profile,
            scenario,
            out=out,
            home=h,
            params_path=params,
            command="bctflow " + " ".join(sys.argv[1:]),
            overrides=list(set_ or []),
            bench_set=list(bench_set or []),
            log=lambda m: console.print(m, highlight=False, markup=False),
            **extra,
        )
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}  ({seconds / 60:.1f} min)")


@bench_app.command("routes")
def bench_routes(
    profile: str = typer.Option("cpu", "--profile", autocompletion=complete_profile, help="benchmark profile"),
    scenario: str = typer.Option("ext_class", "--scenario", help="ext_class | ext_data"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="the report goes to OUT/<profile>/routes-<s>/"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
    bench_set: list[str] | None = typer.Option(
        None, "--bench-set", metavar="KEY=VALUE", help="override a benchmark setting, e.g. --bench-set seeds=[0,1]"
    ),
) -> None:
    """Every upgrade route (compatible, adapter, transform, backfill) on one scenario, each seed, chosen on
    validation: served quality during and after, cost per item, the adapter's share of a backfill's CMC@10."""
    from benchmarks.run import run_routes_benchmark

    _report(run_routes_benchmark, profile, scenario, out, home, params, set_, bench_set)


@bench_app.command("common-reference")
def bench_common_reference(
    profile: str = typer.Option(
        "cpu_equal", "--profile", autocompletion=complete_profile, help="the profile whose method tables to re-make"
    ),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="the tables are OUT/<profile>/<scenario>/"),
    references_from: str = typer.Option(
        "", "--references-from", help="comma-separated profiles on the same data and base models whose φ* join the pool"
    ),
    params: Path = ParamsOpt,
) -> None:
    """Re-make a profile's method tables from their committed results.json and records (no training), each led by
    P_com / P_up against one φ* per scenario × seed × geometry, with the seed-0 frontier (frontier.md, frontier.png)
    and the rule re-applied at four P_up floors (benchmarks/common_reference.py; its views:
    common_reference_report.py)."""
    from benchmarks.common_reference_report import write_common_reference

    try:
        others = [p.strip() for p in references_from.split(",") if p.strip()]
        written = write_common_reference(out, profile, params, "bctflow " + " ".join(sys.argv[1:]), others)
    except BctflowError as err:
        fail(err)
    for md in written:
        console.print(f"report: {md}")


@bench_app.command("budget")
def bench_budget(
    profile: str = typer.Option(
        "cpu_budget", "--profile", autocompletion=complete_profile, help="a profile with a budget: section"
    ),
    where: str = typer.Option("cpu", "--where", help="the points to train: cpu, gpu or all (the profile says which)"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="tables and OUT/<profile>/budget/ go here"),
    report_only: bool = typer.Option(
        False, "--report-only", help="train nothing: re-make the summary from the points' committed tables"
    ),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
    workers: int = typer.Option(0, "--workers", min=0, help="train each point's models on a local Dask cluster"),
    scheduler: str | None = typer.Option(None, "--scheduler", help="train them on the Dask cluster at this address"),
) -> None:
    """How the method ranking moves with the training budget: one method table per budget point of the profile
    (images per class × epochs, fixed configurations), then budget.json / report.md / budget.png with P_com against
    one common φ* per point and seed (benchmarks/budget.py)."""
    from benchmarks.budget import run_budget
    from benchmarks.budget_report import write_budget
    from flows.runtime.workspace import resolve_home

    command = "bctflow " + " ".join(sys.argv[1:])
    announce_params(params)
    try:
        if not report_only:
            h = resolve_home(home)
            configure_environment(h)
            log = lambda m: console.print(m, highlight=False, markup=False)  # noqa: E731
            kw = dict(out=out, home=h, params_path=params, command=command, where=where, log=log, overrides=set_)
            run_budget(profile, workers=workers, scheduler=scheduler, **kw)
        md = write_budget(out, profile, params, command)
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}")


@bench_app.command("scale")
def bench_scale(
    items: int = typer.Option(..., "--items", help="corpus size N (synthetic Fashion-MNIST WebDataset shards)"),
    index: IndexType = typer.Option("ivf", "--index", help="index type"),
    out: Path = typer.Option(..., "--out", help="folder for scale.json and report.md"),
    work: Path = typer.Option(
        Path(".bctflow/bench-scale"), "--work", help="scratch folder: the cached corpus and the benchmark workspace"
    ),
    chunk_size: int = typer.Option(8192, "--chunk-size", help="items per persisted embedding part"),
    epochs: int = typer.Option(2, "--epochs", help="training epochs of the two generations (speed, not quality)"),
    workers: int | None = typer.Option(
        None, "--workers", help="DataLoader worker processes for the corpus (default: params gallery.workers)"
    ),
    store: str = typer.Option(
        "faiss", "--store", help="gallery store: faiss | milvus (a Milvus Lite file) | lancedb (a folder), in --work"
    ),
    workers_sweep: str | None = typer.Option(
        None, "--workers-sweep", help="also a full backfill on a Dask cluster of each worker count, e.g. 1,2"
    ),
) -> None:
    """The production-gallery path at N items: embed, index, search, backfill (killed and resumed), evaluate."""
    from benchmarks.scale import run_scale

    try:
        md = run_scale(
            items,
            index,
            out,
            work=work / (f"n{items}-{index}" + ("" if store == "faiss" else f"-{store}")),
            corpus_dir=work / f"corpus-{items}",
            chunk_size=chunk_size,
            epochs=epochs,
            workers=workers,
            store=store,
            workers_sweep=_counts(workers_sweep),
            log=lambda m: console.print(m, highlight=False, markup=False),
        )
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}")


@bench_app.command("store")
def bench_store(
    items: int = typer.Option(..., "--items", help="rows N of synthetic vectors (Lorentz, d = 128)"),
    store: str = typer.Option(..., "--store", help="gallery store: faiss | lancedb | milvus (in --work)"),
    out: Path = typer.Option(..., "--out", help="folder for scale.json and report.md"),
    work: Path = typer.Option(
        Path(".bctflow/bench-store"), "--work", help="scratch folder: the two versions' parts and the store"
    ),
    chunk_size: int = typer.Option(8192, "--chunk-size", help="rows per part"),
    row_seconds: float = typer.Option(
        300.0, "--row-seconds", help="LanceDB: how long the row path is measured beside the bulk path"
    ),
) -> None:
    """The gallery store layer at N synthetic rows, no model: ingest (bulk and row by row), IVF-PQ build, recall,
    a kill -9 mid-ingest and resume, alias flips and rollbacks between two versions, the transform's carry."""
    from benchmarks.store_scale import run_store_scale

    try:
        md = run_store_scale(
            items,
            store,
            out,
            work=work / f"n{items}-{store}",
            chunk_size=chunk_size,
            row_seconds=row_seconds,
            log=lambda m: console.print(m, highlight=False, markup=False),
        )
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}")


@bench_app.command("transform")
def bench_transform(
    items: int = typer.Option(..., "--items", help="corpus size N (the scale benchmark's synthetic corpus)"),
    out: Path = typer.Option(..., "--out", help="folder for transform.json and report.md"),
    index: IndexType = typer.Option("flat", "--index", help="index type (both backfills build the same)"),
    work: Path = typer.Option(
        Path(".bctflow/bench-scale"), "--work", help="scratch folder: the cached corpus and the benchmark workspace"
    ),
    chunk_size: int = typer.Option(8192, "--chunk-size", help="items per persisted part"),
    epochs: int = typer.Option(2, "--epochs", help="training epochs of the two generations (speed, not quality)"),
    paired_fraction: float | None = typer.Option(
        None,
        "--paired-fraction",
        help="the bridge's pairs, a fraction of the gallery (default upgrade.paired_fraction)",
    ),
) -> None:
    """A gallery transform against a full re-embedding of the same N-item corpus, in one run."""
    from benchmarks.transform_speed import run_transform_bench

    try:
        md = run_transform_bench(
            items,
            out,
            work=work / f"transform-n{items}-{index}",
            corpus_dir=work / f"corpus-{items}",
            index_type=index,
            chunk_size=chunk_size,
            epochs=epochs,
            paired_fraction=paired_fraction,
            log=lambda m: console.print(m, highlight=False, markup=False),
        )
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}")


@bench_app.command("lifecycle")
def bench_lifecycle(
    profile: str = typer.Option("cpu", "--profile", autocompletion=complete_profile, help="benchmark profile"),
    nights: int | None = typer.Option(None, "--nights", help="nights of the season (default: the profile's, 8)"),
    policies: str | None = typer.Option(
        None, "--policies", help="comma-separated policies (default: every one: never,rules,every_k,budget,always)"
    ),
    lineage: str = typer.Option("zeta", "--lineage", help="zeta (Lorentz, HBCT: the shipped) | euclidean (bct)"),
    out: Path = typer.Option(
        Path("benchmarks/results/lifecycle"), "--out", help="the report goes to OUT/<profile>-<lineage>/"
    ),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Every lifecycle policy over a season of nights, each in its own workspace running the real nightly flow:
    served quality per night against compute, each backfill rule's precision and recall (docs/design.md §11)."""
    from benchmarks.lifecycle import LINEAGES, run_lifecycle, stream_settings
    from benchmarks.lifecycle_report import log_lifecycle_run, write_lifecycle_report
    from benchmarks.profile import load_profile
    from flows.runtime.prefect_api import prefect_api
    from flows.runtime.workspace import Workspace, resolve_home

    announce_params(params)
    h = resolve_home(home) / "bench-lifecycle"
    configure_environment(h)
    try:
        prof, base = load_profile(profile, params)
        base = apply_overrides(base, list(set_ or []))
        wanted = None if policies is None else [x.strip() for x in policies.split(",") if x.strip()]
        stream_settings(prof.lifecycle, nights, wanted)  # bad input: one line, before any server starts
        if lineage not in LINEAGES:
            raise ConfigError(f"unknown --lineage {lineage!r}; use one of {', '.join(LINEAGES)}")
        folder = out / f"{prof.name}-{lineage}"
        prefect_api(h)
        record = run_lifecycle(base, home=h, out=folder, lineage=lineage, raw_settings=prof.lifecycle,
                               nights=nights, policies=wanted,
                               log=lambda m: console.print(m, highlight=False, markup=False))  # fmt: skip
        md = write_lifecycle_report(record, folder, "bctflow " + " ".join(sys.argv[1:]))
        uri = Workspace(h).tracking_uri(base)  # the benchmark's own MLflow store
        run = log_lifecycle_run(folder, uri)
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}  ({record['seconds'] / 60:.1f} min); MLflow run {run} at {uri}")


def _counts(text: str | None) -> list[int] | None:
    """``--workers-sweep 1,2`` as worker counts (one line naming the problem for anything else)."""
    if text is None:
        return None
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        fail(ConfigError(f"--workers-sweep {text!r} is not a list of worker counts; write e.g. --workers-sweep 1,2"))
    return counts


def _demo_flows(params: Params) -> dict:
    """Run the demo's generations (params.yaml `generations:`) in a fresh temporary workspace; the wall time against
    the recorded compute."""
    import tempfile
    import time

    from bctflow.generations import run_generation
    from benchmarks.perf import flow_compute

    try:
        p = apply_overrides(params, ["data.dataset=digits"])
        chain = p.declared_chain()
    except BctflowError as err:
        fail(err)
    with tempfile.TemporaryDirectory(prefix="bctflow-perf-") as d:
        home = Path(d) / "home"
        t0 = time.perf_counter()
        for spec in chain:
            run_generation(p, home, spec)
        return flow_compute(home, time.perf_counter() - t0)


@bench_app.command("perf")
def bench_perf(
    out: Path = typer.Option(..., "--out", help="folder for perf.json and report.md"),
    params: Path = ParamsOpt,
    batch: int = typer.Option(128, "--batch", help="training batch size"),
    repeats: int = typer.Option(3, "--repeats", help="rounds per measurement (best of)"),
    flow: bool = typer.Option(True, "--flow/--no-flow", help="also time the demo's flows against their compute"),
) -> None:
    """The system's speed against bare baselines, side by side in one run (train, embed, evaluate, kNN, flow)."""
    from benchmarks.perf import run_perf

    command = "bctflow bench perf " + " ".join(sys.argv[3:]) if len(sys.argv) > 3 else "bctflow bench perf"
    p = parse_params(params, [])
    train = p.train
    md = run_perf(
        out,
        device=train.device,
        compile=train.compile,
        compile_mode=train.compile_mode,
        batch=batch,
        repeats=repeats,
        flow=(lambda: _demo_flows(p)) if flow else None,
        command=command.strip(),
        log=lambda m: console.print(m, highlight=False, markup=False),
    )
    console.print(f"report: {md}")
    console.print((md.parent / "report.md").read_text(), highlight=False, markup=False)
