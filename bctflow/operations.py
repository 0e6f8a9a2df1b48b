"""Commands that operate a workspace: backfill, db-upgrade, doctor, schedule."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from bctflow.choices import BackfillOrder, CapacityDevice
from bctflow.shell import (
    HomeOpt,
    ParamsOpt,
    SetOpt,
    app,
    console,
    fail,
    finish,
    parse_params,
    report_finished,
)
from components.errors import BctflowError, ConfigError
from flows.runtime.env import configure_environment
from flows.runtime.lock import BACKFILL, workspace_lock

if TYPE_CHECKING:
    from flows.backfill.make import BackfillRequest
    from flows.params import Params
    from flows.runtime.workspace import Workspace


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
    transform: bool = typer.Option(
        False,
        "--transform",
        help="carry the live gallery's stored vectors into the generation's space through the lineage's newest "
        "transform bridge (bctflow upgrade --route transform) instead of re-embedding the items",
    ),
    ingest: bool = typer.Option(
        False,
        "--ingest",
        help="add the serving corpus's new items (those the live gallery does not hold), embedded by the live "
        "gallery's own model, as production does when items arrive",
    ),
    plan_only: bool = typer.Option(
        False,
        "--plan",
        help="measure and print the plan (items, predicted time and worker-hours, served mAP at each 10%); "
        "re-embed nothing",
    ),
    items: int | None = typer.Option(
        None,
        "--items",
        help="with --plan: the capacity plan of a gallery of N items (e.g. 1000000000): each route's wall time, "
        "worker-hours, memory and store from measured rates (this workspace's where it has a live gallery, else "
        "the committed reports'), each with its provenance; cited anchors beside (docs/scale.md)",
    ),
    workers: int | None = typer.Option(
        None, "--workers", help="with --items: the processes (or GPUs) that embed at once (default 1)"
    ),
    device: CapacityDevice | None = typer.Option(
        None, "--device", help="with --items: where the workers embed (default cpu)"
    ),
    set_: list[str] | None = SetOpt,
) -> None:
    """Re-embed the live gallery into a new index version (resumable) and switch to it atomically."""
    from flows.backfill.make import BackfillRequest, finished_backfill
    from flows.recovery.reconcile import finish_interrupted
    from flows.runtime.prefect_api import prefect_api
    from flows.runtime.workspace import Workspace, resolve_home

    h = resolve_home(home)
    p = parse_params(params, set_)
    request = BackfillRequest(generation, fraction, order, seed, force, transform, ingest)
    if items is not None or workers is not None or device is not None:
        _capacity(p, Workspace(h), items, plan_only, workers, device, request)
        return
    with contextlib.ExitStack() as held:
        try:
            if not plan_only:  # the plan writes nothing, not even a roll-forward
                report_finished(finish_interrupted(p, h))
            plan = request.plan(p, Workspace(h))
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

            from flows.backfill.forecast import forecast_backfill, forecast_lines, record_command

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
        from flows.backfill.flow import backfill as backfill_flow

        items = ", ".join(f"{g.selected} of {g.total} {g.name} items" for g in plan.galleries)
        how = plan.kind if plan.bridge is None else f"transform by bridge v{plan.bridge.version} ({plan.bridge.kind})"
        console.print(
            f"backfill with generation {plan.target}: {how}, {items}, {plan.n_parts} parts of {plan.chunk_size}"
        )
        res = finish(lambda: backfill_flow(plan, forecast, return_state=True), "backfill")  # the flow logs the plan
        record_command(plan, int(res["event"]), started)  # the next plan's rest: up to the command's end
    console.print(
        f"backfill {res['event']} done: generation {res['target']} now embeds the live gallery "
        f"({res['reembedded']} items {'re-embedded' if res['kind'] != 'transform' else 'carried by the bridge'}, "
        f"{res['parts_resumed']}/{res['parts']} parts resumed from an "
        "earlier run); "
        f"retrieval {', '.join(f'{k} {v:.4f}' for k, v in res['metrics'].items())}"
    )


def _capacity(
    p: Params,
    ws: Workspace,
    items: int | None,
    plan_only: bool,
    workers: int | None,
    device: str | None,
    request: BackfillRequest,
) -> None:
    """``--plan --items N``: print the capacity plan (flows/backfill/capacity_plan.py); refuse --items without
    --plan, and --workers / --device without --items, in one line."""
    import psutil

    from flows.backfill.capacity import capacity_lines
    from flows.backfill.capacity_plan import capacity_plan

    try:
        if items is None:
            raise ConfigError("--workers and --device size a capacity plan; add --plan --items N (the gallery's size)")
        if not plan_only:
            raise ConfigError(f"--items {items} sizes a plan, it runs no backfill; add --plan")
        cap, where = capacity_plan(
            p, ws, items, request, workers=1 if workers is None else workers, device=device or "cpu",
            started=psutil.Process().create_time(),
        )  # fmt: skip
    except BctflowError as err:
        fail(err)
    for line in [*capacity_lines(cap), f"  ({where})"]:
        console.print(line, highlight=False, markup=False, soft_wrap=True)


@app.command(name="db-upgrade")
def db_upgrade(home: Path | None = HomeOpt, params: Path = ParamsOpt) -> None:
    """Migrate the lineage database to this bctflow's schema (back it up first; opening a store never migrates it)."""
    from flows.runtime.workspace import Workspace, resolve_home

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
    from flows.recovery.reconcile import inspect_workspace
    from flows.runtime.workspace import Workspace, resolve_home

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
    from flows.pipeline.deployment import check_schedule, serve_limit
    from flows.pipeline.deployment import write_prefect_yaml as write_yaml
    from flows.runtime.workspace import resolve_home

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

    from flows.lifecycle.nightly import nightly_generation
    from flows.pipeline.deployment import DEPLOYMENT

    nightly_generation.serve(
        name=DEPLOYMENT,
        schedule=Cron(sch.cron, timezone=sch.timezone),
        parameters={"home": str(h), "params_path": str(params)},
        global_limit=serve_limit(),
    )
