"""Commands that operate a workspace: backfill, db-upgrade, schedule, and the benchmarks."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import typer

from bctflow.choices import BackfillOrder, IndexType, Scenario, complete_profile
from bctflow.shell import (
    HomeOpt,
    ParamsOpt,
    SetOpt,
    announce_params,
    app,
    console,
    fail,
    finish,
    parse_params,
    report_finished,
)
from components.errors import BctflowError, ConfigError
from flows.env import configure_environment
from flows.lock import BACKFILL, workspace_lock
from flows.params import Params, apply_overrides


@app.command()
def backfill(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    generation: int | None = typer.Option(
        None, "--generation", help="re-embed with this generation (default: the production generation)"
    ),
    fraction: float = typer.Option(
        1.0, "--fraction", help="re-embed only this fraction of the gallery (partial backfill)"
    ),
    order: BackfillOrder | None = typer.Option(None, "--order", help="partial backfill order (default backfill.order)"),
    seed: int = typer.Option(0, "--seed", help="seed of the random order / tie-breaks"),
    force: bool = typer.Option(
        False,
        "--force",
        help="partial backfill with a generation whose compatibility with the live gallery was not established",
    ),
    plan_only: bool = typer.Option(
        False,
        "--plan",
        help="measure and print the plan (items, predicted time and worker-hours, served mAP at each 10%); "
        "re-embed nothing",
    ),
    set_: list[str] | None = SetOpt,
) -> None:
    """Re-embed the live gallery into a new index version (resumable) and switch to it atomically."""
    from flows.prefect_api import prefect_api
    from flows.steps.reconcile import finish_interrupted
    from flows.steps.reembed import finished_backfill, plan_backfill
    from flows.workspace import Workspace, resolve_home

    h = resolve_home(home)
    p = parse_params(params, set_)
    with contextlib.ExitStack() as held:
        try:
            if not plan_only:  # the plan writes nothing, not even a roll-forward
                report_finished(finish_interrupted(p, h))
            plan = plan_backfill(
                p, Workspace(h), target=generation, fraction=fraction, order=order, seed=seed, force=force
            )
            done = finished_backfill(plan)
            if done is not None:  # rerun after it finished (or after a kill just past its commit): nothing is written
                more = "" if plan.kind == "full" else " (to re-embed more of it: another --fraction, --order or --seed)"
                console.print(
                    f"backfill {done} (generation {plan.target}, {plan.kind}) is already done: the live gallery is "
                    f"the version it published; nothing to {'plan' if plan_only else 'do'}{more}"
                )
                return
            # the plan: measured on a sample in a temporary folder (nothing written, no lock taken), before any
            # Prefect server starts, whose start-up would compete with the measurement for the CPU
            import psutil

            from flows.steps.backfill_plan import forecast_backfill, forecast_lines, record_command

            started = psutil.Process().create_time()  # the command's start: the plan predicts the whole command
            if plan_only:
                for line in forecast_lines(plan, forecast_backfill(plan, started)):
                    console.print(line, highlight=False, markup=False)
                return
            held.enter_context(workspace_lock(h, BACKFILL, p.lineage.db_url))  # before the server (the flow re-enters)
            forecast = forecast_backfill(plan, started)
            prefect_api(h)  # the configured server, or this command's temporary one
        except BctflowError as err:
            fail(err)
        from flows.backfill import backfill as backfill_flow

        items = ", ".join(f"{g.selected} of {g.total} {g.name} items" for g in plan.galleries)
        console.print(
            f"backfill with generation {plan.target}: {plan.kind}, {items}, {plan.n_parts} parts of {plan.chunk_size}"
        )
        res = finish(lambda: backfill_flow(plan, forecast, return_state=True), "backfill")  # the flow logs the plan
        record_command(plan, int(res["event"]), started)  # the next plan's rest: up to the command's end
    console.print(
        f"backfill {res['event']} done: generation {res['target']} now embeds the live gallery "
        f"({res['reembedded']} items re-embedded, {res['parts_resumed']}/{res['parts']} parts resumed from an "
        "earlier run); "
        f"retrieval {', '.join(f'{k} {v:.4f}' for k, v in res['metrics'].items())}"
    )


@app.command(name="db-upgrade")
def db_upgrade(home: Path | None = HomeOpt, params: Path = ParamsOpt) -> None:
    """Migrate the lineage database to this bctflow's schema (back it up first; opening a store never migrates it)."""
    from flows.workspace import Workspace, resolve_home

    p = parse_params(params, None)
    try:
        with Workspace(resolve_home(home)).lineage(p, upgrade=True) as store:
            added = store.upgraded
    except BctflowError as err:
        fail(err)
    if added is None:
        console.print("the lineage database is already at this bctflow's schema; nothing to do")
    else:
        console.print(f"lineage database upgraded ({', '.join(added) or 'version stamp only'})")


@app.command()
def doctor(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    repair: bool = typer.Option(False, "--repair", help="repair what can be repaired (back the workspace up first)"),
) -> None:
    """Check that lineage, files, live pointer and MLflow registry agree (docs/commit-protocol.md)."""
    from flows.steps.reconcile import inspect_workspace
    from flows.workspace import Workspace, resolve_home

    p = parse_params(params, None)
    h = resolve_home(home)
    try:
        if repair:
            with workspace_lock(h, "bctflow doctor --repair", p.lineage.db_url):
                found = inspect_workspace(Workspace(h), p, repair=True)
        else:
            found = inspect_workspace(Workspace(h), p)
    except BctflowError as err:
        fail(err)
    for f in found:
        state = "[green]repaired[/]" if f.repaired else f"[yellow]not repaired[/] — {f.fix}"
        console.print(f"{f.what}: {state}", highlight=False)
    left = [f for f in found if not f.repaired]
    console.print("workspace consistent" if not found else f"{len(found) - len(left)} repaired, {len(left)} left")
    if left:
        raise typer.Exit(1)


@app.command()
def schedule(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    serve: bool = typer.Option(
        False, "--serve", help="serve the nightly deployment from this process (blocks; no worker needed)"
    ),
    write_prefect_yaml: bool = typer.Option(
        False,
        "--write-prefect-yaml",
        help="write ./prefect.yaml (the deployment `prefect deploy` reads) from params.yaml `schedule:`",
    ),
) -> None:
    """Nightly retraining: show the schedule and how to run it, write prefect.yaml from it, or serve it (`--serve`).

    The schedule's one home is params.yaml `schedule:`; one nightly run at a time (docs/design.md §7.14)."""
    from flows.deployment import check_schedule, serve_limit
    from flows.deployment import write_prefect_yaml as write_yaml
    from flows.workspace import resolve_home

    p = parse_params(params, None)
    sch = p.schedule
    try:
        check_schedule(sch)
        if write_prefect_yaml:
            out = Path("prefect.yaml")
            write_yaml(out, p, home=str(home) if home is not None else ".bctflow", params_path=str(params))
            console.print(f"wrote {out.resolve()} (cron '{sch.cron}', {sch.timezone}); deploy it: prefect deploy --all")
            return
    except BctflowError as err:
        fail(err)
    h = resolve_home(home)
    if not serve:
        console.print(
            f"nightly retraining: cron '{sch.cron}' ({sch.timezone}); it retrains only when data, model parameters "
            "or the model-shaping code changed; one run at a time (a run due while one runs waits for it)."
        )
        console.print("  serve it from this process:      bctflow schedule --serve")
        console.print('  or deploy it to a Prefect server (docs/operations.md, "Nightly retraining"):')
        console.print("    prefect server start                    # another shell")
        console.print("    export PREFECT_API_URL=http://127.0.0.1:4200/api")
        console.print("    bctflow schedule --write-prefect-yaml   # after changing params.yaml `schedule:`")
        console.print("    prefect work-pool create bctflow --type process")
        console.print("    prefect deploy --all && prefect worker start --pool bctflow")
        return
    configure_environment(h)
    from prefect.schedules import Cron

    from flows.deployment import DEPLOYMENT
    from flows.nightly import nightly_generation

    nightly_generation.serve(
        name=DEPLOYMENT,
        schedule=Cron(sch.cron, timezone=sch.timezone),
        parameters={"home": str(h), "params_path": str(params)},
        global_limit=serve_limit(),
    )


bench_app = typer.Typer(
    no_args_is_help=False, help="Benchmarks: the method table (default), `routes`, `scale` and `perf`."
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
    from flows.workspace import resolve_home

    announce_params(params)
    h = resolve_home(home)
    configure_environment(h)
    try:
        md, seconds = run_benchmark(
            profile,
            scenario,
            out=out,
            home=h,
            params_path=params,
            command="bctflow " + " ".join(sys.argv[1:]),
            tag=tag,
            overrides=list(set_ or []),
            bench_set=list(bench_set or []),
            methods=methods,
            workers=workers,
            scheduler=scheduler,
            log=lambda m: console.print(m, highlight=False, markup=False),
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
    from flows.workspace import resolve_home

    announce_params(params)
    h = resolve_home(home)
    configure_environment(h)
    try:
        md, seconds = run_routes_benchmark(
            profile,
            scenario,
            out=out,
            home=h,
            params_path=params,
            command="bctflow " + " ".join(sys.argv[1:]),
            overrides=list(set_ or []),
            bench_set=list(bench_set or []),
            log=lambda m: console.print(m, highlight=False, markup=False),
        )
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}  ({seconds / 60:.1f} min)")


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
