"""The `bctflow` command line (typer): a thin shell over flows/ (and benchmarks/ for `bench`).

Each command parses params.yaml once and, for a generation or a backfill, makes
the run's one plan before any Prefect server starts, so bad input fails fast
and writes nothing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from components.errors import BctflowError, ConfigError
from flows.env import configure_environment
from flows.params import DEFAULT_PARAMS_PATH, GenerationSpec, Params, load_params
from flows.workspace import Workspace, resolve_home

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Backward-compatible embedding lifecycle.")
# piped output (CI logs, `| tee`) gets 140 columns instead of rich's default 80
console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)

HomeOpt = typer.Option(None, "--home", help="workspace directory (default: $BCTFLOW_HOME or ./.bctflow)")
ParamsOpt = typer.Option(DEFAULT_PARAMS_PATH, "--params", help="params.yaml to use")
SetOpt = typer.Option(None, "--set", help="override a parameter, e.g. --set train.epochs=5 (repeatable)")

DEMO_CHAIN = [
    GenerationSpec(name="g0", classes=[0, 1, 2, 3, 4], alignment="independent"),
    GenerationSpec(name="g1", classes="all", alignment="hbct", reference=True),
]


def _fail(err: Exception) -> None:
    err_console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True, highlight=False)
    raise typer.Exit(2)


def _params(path: Path, overrides: list[str] | None) -> Params:
    try:
        return load_params(path, overrides)
    except BctflowError as err:
        _fail(err)
        raise  # unreachable: _fail exits


def _finish(state: Any, what: str) -> Any:
    """The flow's result, or one clear error line and a non-zero exit."""
    if state.is_failed():
        try:
            state.result()
        except BctflowError as err:
            _fail(err)
        except Exception as err:
            err_console.print(
                f"[bold red]{what} failed:[/] {type(err).__name__}: {escape(str(err))}", soft_wrap=True, highlight=False
            )
            raise typer.Exit(1) from None
    return state.result()


def _run_generation(params: Params, home: Path, spec: GenerationSpec | None) -> dict[str, Any]:
    """Plan (the run's only plan; refuses bad input before any server starts), then run the flow."""
    from flows.steps.preflight import plan_generation

    try:
        plan = plan_generation(params, home, spec)
    except BctflowError as err:
        _fail(err)
    home.mkdir(parents=True, exist_ok=True)
    configure_environment(home)
    from flows.new_generation import new_generation

    return _finish(new_generation(plan, return_state=True), "generation")


def _lineage(params: Params, home: Path) -> list[dict[str, Any]]:
    store = Workspace(home).lineage(params, readonly=True)
    try:
        return store.to_json()
    finally:
        store.close()


def _parse_classes(text: str | None) -> list[int] | str | None:
    """'all' | '0-4' | '0,1,2' → spec value."""
    if text is None:
        return None
    text = text.strip()
    if text == "all":
        return "all"
    out: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part.strip():
                out.append(int(part))
    except ValueError:
        raise ConfigError(f"--classes {text!r} is not a class list; write e.g. 0-4, 0,2,5 or all") from None
    return out


@app.command()
def demo(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    reset: bool = typer.Option(False, "--reset", help="wipe an existing bctflow workspace first"),
    set_: list[str] | None = SetOpt,
) -> None:
    """Fresh workspace: g0 on digits classes 0–4, then g1 on all classes with HBCT + an independent reference."""
    from bctflow.tables import compat_table, retrieval_table

    h = resolve_home(home)
    ws = Workspace(h)
    p = _params(params, ["data.dataset=digits", *(set_ or [])])
    try:
        if not ws.is_empty():
            if not reset:
                raise ConfigError(
                    f"workspace {h} is not empty; pass --reset to wipe it or --home to use another directory"
                )
            ws.reset()
    except BctflowError as err:
        _fail(err)
    t0 = time.perf_counter()
    for spec in DEMO_CHAIN:
        console.rule(f"[bold]generation {spec.name}: {spec.alignment} on classes {spec.classes}")
        _run_generation(p, h, spec)
    wall = time.perf_counter() - t0
    gens = _lineage(p, h)
    console.print(retrieval_table(gens))
    console.print(compat_table(gens))
    g1 = gens[-1]
    if g1["backfill_required"]:
        console.print(f"[yellow]g{g1['id']}: backfill required[/] — " + "; ".join(g1["backfill_reasons"]))
    else:
        console.print(f"g{g1['id']}: no backfill required (compatible with the live gallery of g{g1['parent']})")
    diag = g1.get("diagnostics") or {}
    if diag:
        nan = float("nan")
        console.print(
            "HBCT health: clip fraction (gallery, new/parent) "
            f"{diag.get('clip_fraction_gallery', nan):.2f}/{diag.get('clip_fraction_gallery_parent', nan):.2f}, "
            f"in-cone {diag.get('in_cone_fraction', nan):.3f}, "
            f"parent uncertainty seen/unseen {diag.get('uncertainty_parent_seen', nan):.3f}/{diag.get('uncertainty_parent_unseen', nan):.3f}"
        )
    console.print(f"\ndemo finished in {wall:.0f}s. Next:")
    console.print(f"  bctflow lineage --home {h}            # the chain, ζ, backfill flags (--json for machines)")
    console.print(f"  mlflow ui --backend-store-uri {ws.tracking_uri(p)}   # runs, model versions, tags, plots")
    console.print(
        f"  ls {ws.generations_dir}                 # checkpoints, gallery embeddings, FAISS indexes, metrics.json"
    )


@app.command()
def run(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    generation: str | None = typer.Option(
        None, "--generation", help="take the spec of this entry of params.yaml `generations:`"
    ),
    name: str | None = typer.Option(None, "--name", help="name of the new generation (default g<id>)"),
    classes: str | None = typer.Option(None, "--classes", help="class selection: all | 0-4 | 0,2,5"),
    fraction: float | None = typer.Option(None, "--fraction", help="random fraction of the selected training data"),
    alignment: str | None = typer.Option(None, "--alignment", help="alignment method (default alignment.method)"),
    epochs: int | None = typer.Option(None, "--epochs"),
    reference: bool | None = typer.Option(
        None, "--reference/--no-reference", help="also train an independent reference (P_com, P_up)"
    ),
    set_: list[str] | None = SetOpt,
) -> None:
    """Create one new generation, aligned to the generation that embedded the live gallery."""
    from bctflow.tables import compat_table, retrieval_table

    h = resolve_home(home)
    p = _params(params, set_)
    try:
        base = p.generation(generation).model_dump() if generation else {}
        explicit = {
            "name": name,
            "classes": _parse_classes(classes),
            "fraction": fraction,
            "alignment": alignment,
            "epochs": epochs,
            "reference": reference,
        }
        spec = GenerationSpec(**{**base, **{k: v for k, v in explicit.items() if v is not None}})
    except BctflowError as err:
        _fail(err)
    except ValueError as err:
        _fail(ConfigError(str(err)))
    summary = _run_generation(p, h, spec)
    gens = [g for g in _lineage(p, h) if g["id"] == summary["generation"]]
    console.print(retrieval_table(gens))
    if gens and gens[0]["parent"] is not None:
        console.print(compat_table(gens))


@app.command()
def chain(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    expect_data: Path | None = typer.Option(
        None, "--expect-data", help="folder of manifests from `bctflow snapshot`; fail if a generation used other data"
    ),
    metrics_out: Path | None = typer.Option(
        None, "--metrics-out", help="write a flat metrics JSON (for `dvc metrics`)"
    ),
    set_: list[str] | None = SetOpt,
) -> None:
    """Run every generation declared in params.yaml that the workspace does not have yet, in order."""
    from bctflow.tables import compat_table, lineage_table
    from components.io import atomic_write_text
    from flows.chain import flat_metrics
    from registry.data_snapshots import DataSnapshotStore

    h = resolve_home(home)
    p = _params(params, set_)
    if not p.generations:
        _fail(ConfigError("params.yaml declares no `generations:`; add the chain to reproduce (see README)"))
    done = {g["name"] for g in _lineage(p, h)}
    for spec in p.generations:
        if spec.name in done:
            console.print(f"generation {spec.name} already in the lineage, skipping")
            continue
        console.rule(f"[bold]generation {spec.name}")
        summary = _run_generation(p, h, spec)
        if expect_data is not None:
            used = DataSnapshotStore(Workspace(h).data_dir).load(f"gen_{summary['generation']:03d}")
            if used.to_json() != (expect_data / f"{spec.name}.json").read_text():
                _fail(
                    ConfigError(
                        f"generation {spec.name} trained on data that differs from {expect_data / (spec.name + '.json')}; run `dvc repro` from a clean workspace"
                    )
                )
    gens = _lineage(p, h)
    console.print(lineage_table(gens))
    console.print(compat_table(gens))
    if metrics_out is not None:
        metrics_out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(metrics_out, json.dumps(flat_metrics(gens), indent=2, sort_keys=True) + "\n")


@app.command()
def snapshot(
    out: Path = typer.Option(Path("outputs/data"), "--out", help="folder for one manifest per declared generation"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Write the data manifest of every generation declared in params.yaml (the `data` stage of dvc.yaml)."""
    from flows.chain import write_manifests

    p = _params(params, set_)
    try:
        paths = write_manifests(p, Workspace(resolve_home(home)), out)
    except BctflowError as err:
        _fail(err)
    for path in paths:
        console.print(f"wrote {path}")


@app.command()
def lineage(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    as_json: bool = typer.Option(False, "--json", help="print the lineage as a JSON array (schema in README)"),
) -> None:
    """Show the lineage: generations, ζ, metrics, backfill decisions, the live gallery."""
    from bctflow.tables import compat_table, lineage_table

    h = resolve_home(home)
    p = _params(params, None) if params.exists() else Params()
    try:
        gens = _lineage(p, h)
    except BctflowError as err:
        _fail(err)
    if not gens:
        _fail(BctflowError(f"no lineage in {h}; run `bctflow demo` or `bctflow run` first, or pass --home"))
    if as_json:
        sys.stdout.write(json.dumps(gens, indent=2, default=str) + "\n")
        return
    console.print(lineage_table(gens))
    console.print(compat_table(gens))


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
    order: str | None = typer.Option(
        None, "--order", help="partial backfill order: uncertainty | random | oldest (default backfill.order)"
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the random order / tie-breaks"),
    force: bool = typer.Option(
        False,
        "--force",
        help="partial backfill with a generation whose compatibility with the live gallery was not established",
    ),
    set_: list[str] | None = SetOpt,
) -> None:
    """Re-embed the live gallery into a new index version (resumable) and switch to it atomically."""
    from flows.steps.reembed import plan_backfill

    h = resolve_home(home)
    p = _params(params, set_)
    try:
        plan = plan_backfill(p, Workspace(h), target=generation, fraction=fraction, order=order, seed=seed, force=force)
    except BctflowError as err:
        _fail(err)
    configure_environment(h)
    from flows.backfill import backfill as backfill_flow

    console.print(
        f"backfill with generation {plan.target}: {plan.kind}, {len(plan.positions)} items, {plan.n_chunks} chunks of {plan.chunk_size}"
    )
    res = _finish(backfill_flow(plan, return_state=True), "backfill")
    console.print(
        f"backfill {res['event']} done: generation {res['target']} now embeds the live gallery "
        f"({res['reembedded']} items re-embedded, {res['chunks_resumed']}/{res['chunks']} chunks resumed from an earlier run); "
        f"retrieval {', '.join(f'{k} {v:.4f}' for k, v in res['metrics'].items())}"
    )


@app.command()
def promote(
    generation: int = typer.Argument(..., help="generation id to serve as `production`"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    force: bool = typer.Option(False, "--force", help="override a failed promotion gate (recorded in the lineage)"),
    by: str | None = typer.Option(None, "--by", help="who promotes (default: the login name)"),
    reason: str = typer.Option("", "--reason", help="why (recorded in the lineage)"),
) -> None:
    """Point the MLflow alias `production` at a generation (the gate applies unless --force)."""
    import getpass

    from flows.steps.promotion import promote as do_promote

    p = _params(params, None)
    try:
        res = do_promote(
            p, Workspace(resolve_home(home)), generation, force=force, by=by or getpass.getuser(), reason=reason
        )
    except BctflowError as err:
        _fail(err)
    console.print(
        f"generation {res['generation']} (version {res['version']}) is production{' — FORCED past the gate' if res['forced'] else ''}; "
        f"recorded by {res['by']} at {res['at']}"
    )
    if not res["live_gallery_accepts_queries"]:
        console.print(
            f"[yellow]note:[/] the live gallery does not accept generation {generation}'s queries (not compatible with it); "
            f"run `bctflow backfill --generation {generation}` before serving its queries"
        )


@app.command(name="db-upgrade")
def db_upgrade(home: Path | None = HomeOpt, params: Path = ParamsOpt) -> None:
    """Migrate the lineage database to this bctflow's schema (back it up first; opening a store never migrates it)."""
    p = _params(params, None) if params.exists() else Params()
    try:
        store = Workspace(resolve_home(home)).lineage(p, upgrade=True)
    except BctflowError as err:
        _fail(err)
    added = store.upgraded
    store.close()
    if added is None:
        console.print("the lineage database is already at this bctflow's schema; nothing to do")
    else:
        console.print(f"lineage database upgraded ({', '.join(added) or 'version stamp only'})")


@app.command()
def schedule(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    serve: bool = typer.Option(
        False, "--serve", help="serve the nightly deployment from this process (blocks; no worker needed)"
    ),
) -> None:
    """Nightly retraining: show the schedule and how to run it, or serve it (`--serve`)."""
    h = resolve_home(home)
    sch = _params(params, None).schedule
    if not serve:
        console.print(
            f"nightly retraining: cron '{sch.cron}' ({sch.timezone}); it retrains only when data or model parameters changed."
        )
        console.print("  serve it from this process:      bctflow schedule --serve")
        console.print("  or deploy it to a Prefect server: prefect server start  (another shell)")
        console.print("                                   prefect work-pool create bctflow --type process")
        console.print("                                   prefect deploy --all && prefect worker start --pool bctflow")
        return
    configure_environment(h)
    from prefect.schedules import Cron

    from flows.nightly import nightly_generation

    nightly_generation.serve(
        name="nightly",
        schedule=Cron(sch.cron, timezone=sch.timezone),
        parameters={"home": str(h), "params_path": str(params)},
    )


@app.command()
def bench(
    profile: str = typer.Option(
        "cpu", "--profile", help="benchmark profile: cpu | gpu | a YAML path (benchmarks/profiles/)"
    ),
    scenario: str = typer.Option(
        ..., "--scenario", help="ext_data | ext_class | new_arch | both | sequential | partial_backfill"
    ),
    out: Path = typer.Option(
        Path("benchmarks/results"), "--out", help="reports go to OUT/<profile>/<scenario>[-<tag>]/"
    ),
    tag: str | None = typer.Option(None, "--tag", help="suffix for the report folder (e.g. a harder variant)"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
    bench_set: list[str] | None = typer.Option(
        None, "--bench-set", help="override a benchmark setting, e.g. --bench-set old_class_fraction=0.3"
    ),
    methods: str | None = typer.Option(None, "--methods", help="comma-separated subset of the profile's methods"),
) -> None:
    """Run every method of a profile on one scenario and write a Table-1-style report (markdown + CSV + JSON)."""
    from benchmarks.run import run_benchmark

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
            log=lambda m: console.print(m, highlight=False, markup=False),
        )
    except BctflowError as err:
        _fail(err)
    console.print(f"report: {md}  ({seconds / 60:.1f} min)")


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
