"""The `bctflow` command line (typer)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from flows.env import configure_environment
from flows.params import (
    DEFAULT_PARAMS_PATH,
    GenerationSpec,
    Params,
    apply_overrides,
    load_params,
    load_params_with,
)
from flows.workspace import Workspace, resolve_home
from components.errors import BctflowError, ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Backward-compatible embedding lifecycle.")
# piped output (CI logs, `| tee`) gets 140 columns instead of rich's default 80
console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)

HomeOpt = typer.Option(None, "--home", help="workspace directory (default: $BCTFLOW_HOME or ./.bctflow)")
ParamsOpt = typer.Option(DEFAULT_PARAMS_PATH, "--params", help="params.yaml to use")
SetOpt = typer.Option(None, "--set", help="override a parameter, e.g. --set train.epochs=5 (repeatable)")

#: names a bctflow workspace may contain (demo --reset wipes nothing else)
WORKSPACE_ENTRIES = {"lineage.db", "mlflow.db", "mlartifacts", "data", "datasets", "generations", "staging", "prefect", "backfills", "live", "bench-cache", ".lock"}

DEMO_CHAIN = [
    {"name": "g0", "classes": [0, 1, 2, 3, 4], "alignment": "independent"},
    {"name": "g1", "classes": "all", "alignment": "hbct", "reference": True},
]


def _fail(err: Exception) -> None:
    err_console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True, highlight=False)
    raise typer.Exit(2)


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


def _run_flow(home: Path, params_path: Path, overrides: list[str], spec: dict[str, Any] | None) -> dict[str, Any]:
    from flows.steps.preflight import preflight

    try:
        preflight(params_path, overrides, home, spec)
    except BctflowError as err:
        _fail(err)
    home.mkdir(parents=True, exist_ok=True)
    configure_environment(home)
    from flows.new_generation import new_generation

    state = new_generation(home=str(home), params_path=str(params_path), overrides=overrides, spec=spec, return_state=True)
    if state.is_failed():
        try:
            state.result()
        except BctflowError as err:
            _fail(err)
        except Exception as err:
            err_console.print(f"[bold red]generation failed:[/] {type(err).__name__}: {escape(str(err))}", soft_wrap=True, highlight=False)
            raise typer.Exit(1)
    return state.result()


def _lineage(home: Path, params_path: Path, overrides: list[str]) -> list[dict[str, Any]]:
    from registry.lineage import LineageStore

    p = _load(params_path, overrides) if Path(params_path).exists() else None
    ws = Workspace(home)
    url = ws.lineage_url(p) if p is not None else f"sqlite:///{home / 'lineage.db'}"
    store = LineageStore(url)
    try:
        return store.to_json()
    finally:
        store.close()


def _load(params_path: Path, overrides: list[str]) -> Params:
    """params.yaml with --set overrides applied, validated (ConfigError on problems)."""
    return load_params_with(params_path, overrides)


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
    overrides = ["data.dataset=digits", *(set_ or [])]
    try:
        _load(params, overrides)
        if not ws.is_empty():
            if not reset:
                raise ConfigError(f"workspace {h} is not empty; pass --reset to wipe it or --home to use another directory")
            foreign = sorted(p.name for p in h.iterdir() if p.name not in WORKSPACE_ENTRIES)
            if foreign:
                raise ConfigError(f"{h} holds files that are not bctflow's ({', '.join(foreign[:5])}); refusing to wipe it, pick another --home")
            shutil.rmtree(h)
    except BctflowError as err:
        _fail(err)
    t0 = time.perf_counter()
    for spec in DEMO_CHAIN:
        console.rule(f"[bold]generation {spec['name']}: {spec['alignment']} on classes {spec['classes']}")
        _run_flow(h, params, overrides, spec)
    wall = time.perf_counter() - t0
    gens = _lineage(h, params, overrides)
    console.print(retrieval_table(gens))
    console.print(compat_table(gens))
    g1 = gens[-1]
    if g1["backfill_required"]:
        console.print(f"[yellow]g{g1['id']}: backfill required[/] — " + "; ".join(g1["backfill_reasons"]))
    else:
        console.print(f"g{g1['id']}: no backfill required (compatible with the live gallery of g{g1['parent']})")
    diag = g1.get("diagnostics") or {}
    if diag:
        console.print(
            "HBCT health: clip fraction (gallery, new/parent) "
            f"{diag.get('clip_fraction_gallery', float('nan')):.2f}/{diag.get('clip_fraction_gallery_parent', float('nan')):.2f}, "
            f"in-cone {diag.get('in_cone_fraction', float('nan')):.3f}, "
            f"parent uncertainty seen/unseen {diag.get('uncertainty_parent_seen', float('nan')):.3f}/{diag.get('uncertainty_parent_unseen', float('nan')):.3f}"
        )
    console.print(f"\ndemo finished in {wall:.0f}s. Next:")
    console.print(f"  bctflow lineage --home {h}            # the chain, ζ, backfill flags (--json for machines)")
    console.print(f"  mlflow ui --backend-store-uri sqlite:///{h / 'mlflow.db'}   # runs, model versions, tags, plots")
    console.print(f"  ls {h / 'generations'}                 # checkpoints, gallery embeddings, FAISS indexes, metrics.json")


@app.command()
def run(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    generation: str | None = typer.Option(None, "--generation", help="take the spec of this entry of params.yaml `generations:`"),
    name: str | None = typer.Option(None, "--name", help="name of the new generation (default g<id>)"),
    classes: str | None = typer.Option(None, "--classes", help="class selection: all | 0-4 | 0,2,5"),
    fraction: float | None = typer.Option(None, "--fraction", help="random fraction of the selected training data"),
    alignment: str | None = typer.Option(None, "--alignment", help="alignment method (default alignment.method)"),
    epochs: int | None = typer.Option(None, "--epochs"),
    reference: bool | None = typer.Option(None, "--reference/--no-reference", help="also train an independent reference (P_com, P_up)"),
    set_: list[str] | None = SetOpt,
) -> None:
    """Create one new generation, aligned to the generation that embedded the live gallery."""
    h = resolve_home(home)
    overrides = list(set_ or [])
    try:
        p = _load(params, overrides)
        base = p.generation(generation).model_dump() if generation else {"name": name or "__auto__"}
        explicit = {"name": name, "classes": _parse_classes(classes), "fraction": fraction, "alignment": alignment, "epochs": epochs, "reference": reference}
        base.update({k: v for k, v in explicit.items() if v is not None})
        if base["name"] == "__auto__":
            base.pop("name")
            from flows.steps.preflight import open_store_readonly

            store = open_store_readonly(p, Workspace(h))
            base["name"] = f"g{store.next_generation_id()}"
            store.close()
        spec = GenerationSpec(**base).model_dump()
    except BctflowError as err:
        _fail(err)
    except ValueError as err:
        _fail(ConfigError(str(err)))
    summary = _run_flow(h, params, overrides, spec)
    from bctflow.tables import compat_table, retrieval_table

    gens = [g for g in _lineage(h, params, overrides) if g["id"] == summary["generation"]]
    console.print(retrieval_table(gens))
    if gens and gens[0]["parent"] is not None:
        console.print(compat_table(gens))


@app.command()
def chain(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    expect_data: Path | None = typer.Option(None, "--expect-data", help="folder of manifests from `bctflow snapshot`; fail if a generation used other data"),
    metrics_out: Path | None = typer.Option(None, "--metrics-out", help="write a flat metrics JSON (for `dvc metrics`)"),
    set_: list[str] | None = SetOpt,
) -> None:
    """Run every generation declared in params.yaml that the workspace does not have yet, in order."""
    from registry.data_snapshots import DataSnapshotStore

    h = resolve_home(home)
    overrides = list(set_ or [])
    try:
        p = _load(params, overrides)
        if not p.generations:
            raise ConfigError("params.yaml declares no `generations:`; add the chain to reproduce (see README)")
    except BctflowError as err:
        _fail(err)
    done = {g["name"] for g in _lineage(h, params, overrides)} if (h / "lineage.db").exists() else set()
    for spec in p.generations:
        if spec.name in done:
            console.print(f"generation {spec.name} already in the lineage, skipping")
            continue
        console.rule(f"[bold]generation {spec.name}")
        summary = _run_flow(h, params, overrides, spec.model_dump())
        if expect_data is not None:
            used = DataSnapshotStore(Workspace(h).data_dir).load(f"gen_{summary['generation']:03d}")
            want = (expect_data / f"{spec.name}.json").read_text()
            if used.to_json() != want:
                _fail(ConfigError(f"generation {spec.name} trained on data that differs from {expect_data / (spec.name + '.json')}; run `dvc repro` from a clean workspace"))
    gens = _lineage(h, params, overrides)
    from bctflow.tables import compat_table, lineage_table

    console.print(lineage_table(gens))
    console.print(compat_table(gens))
    if metrics_out is not None:
        flat: dict[str, Any] = {}
        for g in gens:
            m = g["metrics"]
            for block in ("self", "cross", "parent_self", "p_com", "p_up"):
                for k, v in (m.get(block) or {}).items():
                    flat[f"{g['name']}.{block}.{k}"] = v
            flat[f"{g['name']}.zeta"] = g["zeta"]
            flat[f"{g['name']}.backfill_required"] = g["backfill_required"]
        metrics_out.parent.mkdir(parents=True, exist_ok=True)
        metrics_out.write_text(json.dumps(flat, indent=2, sort_keys=True) + "\n")


@app.command()
def snapshot(
    out: Path = typer.Option(Path("outputs/data"), "--out", help="folder for one manifest per declared generation"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Write the data manifest of every generation declared in params.yaml (the `data` stage of dvc.yaml)."""
    from flows.chain import write_manifests

    try:
        p = _load(params, list(set_ or []))
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
    h = resolve_home(home)
    if not (h / "lineage.db").exists() and not load_params(params).lineage.db_url:
        _fail(BctflowError(f"no lineage in {h}; run `bctflow demo` or `bctflow run` first, or pass --home"))
    gens = _lineage(h, params, [])
    if as_json:
        sys.stdout.write(json.dumps(gens, indent=2, default=str) + "\n")
        return
    from bctflow.tables import compat_table, lineage_table

    console.print(lineage_table(gens))
    console.print(compat_table(gens))


@app.command()
def backfill(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    generation: int | None = typer.Option(None, "--generation", help="re-embed with this generation (default: the production generation)"),
    fraction: float = typer.Option(1.0, "--fraction", help="re-embed only this fraction of the gallery (partial backfill)"),
    order: str | None = typer.Option(None, "--order", help="partial backfill order: uncertainty | random | oldest (default backfill.order)"),
    seed: int = typer.Option(0, "--seed", help="seed of the random order / tie-breaks"),
    force: bool = typer.Option(False, "--force", help="partial backfill with a generation whose compatibility with the live gallery was not established"),
    set_: list[str] | None = SetOpt,
) -> None:
    """Re-embed the live gallery into a new index version (resumable) and switch to it atomically."""
    from flows.steps.reembed import plan_backfill
    from flows.steps.preflight import open_store_readonly

    h = resolve_home(home)
    overrides = list(set_ or [])
    try:
        p = _load(params, overrides)
        if not (h / "lineage.db").exists() and not p.lineage.db_url:
            raise BctflowError(f"no lineage in {h}; run `bctflow run` first, or pass --home")
        store = open_store_readonly(p, Workspace(h))
        try:  # validate now (clear error, no Prefect server); the flow plans again and resumes the same work
            plan = plan_backfill(p, Workspace(h), store, target=generation, fraction=fraction, order=order, seed=seed, force=force)
        finally:
            store.close()
    except BctflowError as err:
        _fail(err)
    configure_environment(h)
    from flows.backfill import backfill as backfill_flow

    console.print(f"backfill with generation {plan.target}: {plan.kind}, {len(plan.positions)} items, {plan.n_chunks} chunks of {plan.chunk_size}")
    state = backfill_flow(home=str(h), params_path=str(params), overrides=overrides, generation=plan.target, fraction=fraction, order=order, seed=seed, force=force, return_state=True)
    if state.is_failed():
        try:
            state.result()
        except BctflowError as err:
            _fail(err)
        except Exception as err:
            err_console.print(f"[bold red]backfill failed:[/] {type(err).__name__}: {escape(str(err))}", soft_wrap=True, highlight=False)
            raise typer.Exit(1)
    res = state.result()
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

    h = resolve_home(home)
    try:
        p = _load(params, [])
        res = do_promote(p, Workspace(h), generation, force=force, by=by or getpass.getuser(), reason=reason)
    except BctflowError as err:
        _fail(err)
    console.print(f"generation {res['generation']} (version {res['version']}) is production{' — FORCED past the gate' if res['forced'] else ''}; "
                  f"recorded by {res['by']} at {res['at']}")
    if not res["live_gallery_accepts_queries"]:
        console.print(f"[yellow]note:[/] the live gallery does not accept generation {generation}'s queries (not compatible with it); "
                      f"run `bctflow backfill --generation {generation}` before serving its queries")


@app.command()
def schedule(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    serve: bool = typer.Option(False, "--serve", help="serve the nightly deployment from this process (blocks; no worker needed)"),
) -> None:
    """Nightly retraining: show the schedule and how to run it, or serve it (`--serve`)."""
    h = resolve_home(home)
    try:
        p = _load(params, [])
    except BctflowError as err:
        _fail(err)
    sch = p.schedule
    if not serve:
        console.print(f"nightly retraining: cron '{sch.cron}' ({sch.timezone}); it retrains only when data or model parameters changed.")
        console.print("  serve it from this process:      bctflow schedule --serve")
        console.print("  or deploy it to a Prefect server: prefect server start  (another shell)")
        console.print("                                   prefect work-pool create bctflow --type process")
        console.print("                                   prefect deploy --all && prefect worker start --pool bctflow")
        return
    configure_environment(h)
    from prefect.schedules import Cron

    from flows.nightly import nightly_generation

    nightly_generation.serve(name="nightly", schedule=Cron(sch.cron, timezone=sch.timezone), parameters={"home": str(h), "params_path": str(params)})


@app.command()
def bench(
    profile: str = typer.Option("cpu", "--profile", help="benchmark profile: cpu | gpu | a YAML path (benchmarks/profiles/)"),
    scenario: str = typer.Option(..., "--scenario", help="ext_data | ext_class | new_arch | both | sequential | partial_backfill"),
    out: Path = typer.Option(Path("benchmarks/results"), "--out", help="reports go to OUT/<profile>/<scenario>[-<tag>]/"),
    tag: str | None = typer.Option(None, "--tag", help="suffix for the report folder (e.g. a harder variant)"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    set_: list[str] | None = SetOpt,
    bench_set: list[str] | None = typer.Option(None, "--bench-set", help="override a benchmark setting, e.g. --bench-set old_class_fraction=0.3"),
    methods: str | None = typer.Option(None, "--methods", help="comma-separated subset of the profile's methods"),
) -> None:
    """Run every method of a profile on one scenario and write a Table-1-style report (markdown + CSV + JSON)."""
    import datetime
    import os

    from benchmarks.profile import load_profile
    from benchmarks.report import write_sequential_report, write_table_report
    from benchmarks.runner import Bench
    from benchmarks.scenarios import SCENARIOS, make_scenario, run_sequential, run_table

    try:
        prof, p = load_profile(profile, params)
        if set_:
            p = apply_overrides(p, list(set_))
        if bench_set or methods:
            raw = prof.bench.model_dump()
            for item in bench_set or []:
                if "=" not in item:
                    raise ConfigError(f"--bench-set {item!r} is not KEY=VALUE")
                k, v = item.split("=", 1)
                if k not in raw:
                    raise ConfigError(f"--bench-set: unknown benchmark setting {k!r}; see benchmarks/profile.py BenchSettings")
                import yaml

                raw[k] = yaml.safe_load(v)
            if methods:
                wanted = [m.strip() for m in methods.split(",") if m.strip()]
                known = {m["name"] for m in raw["methods"]}
                missing = [m for m in wanted if m not in known]
                if missing:
                    raise ConfigError(f"--methods {missing} are not in profile {prof.name!r} (it has {sorted(known)})")
                raw["methods"] = [m for m in raw["methods"] if m["name"] in wanted]
                raw["sequential_methods"] = [m for m in raw["sequential_methods"] if m == "independent" or m in wanted]
            prof = prof.model_copy(update={"bench": type(prof.bench).model_validate(raw)})
        if scenario not in SCENARIOS + ("partial_backfill",):
            raise ConfigError(f"unknown scenario {scenario!r}; use one of {', '.join(SCENARIOS + ('partial_backfill',))}")
    except BctflowError as err:
        _fail(err)
    h = resolve_home(home)
    configure_environment(h)
    folder = out / prof.name / (scenario + (f"-{tag}" if tag else ""))
    t0 = time.perf_counter()
    b = Bench(prof, p, h / "bench-cache" / prof.name, Workspace(h).datasets_dir(p), log=lambda m: console.print(m, highlight=False, markup=False))
    from components.training.device import select_device

    ctx = {
        "command": "bctflow " + " ".join(sys.argv[1:]),
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
        "tune_tol": prof.bench.tune_self_tolerance,
        "date": datetime.date.today().isoformat(),
    }
    if scenario == "partial_backfill":
        from benchmarks.partial_backfill import (
            run_partial_backfill,
            write_partial_report,
        )

        curve = run_partial_backfill(b)
        ctx["wall_seconds"] = time.perf_counter() - t0
        md = write_partial_report(curve, ctx, folder)
    elif scenario == "sequential":
        res = run_sequential(b)
        ctx["wall_seconds"] = time.perf_counter() - t0
        md = write_sequential_report(res, ctx, folder)
    else:
        result = run_table(b, make_scenario(b, scenario))
        ctx["wall_seconds"] = time.perf_counter() - t0
        md = write_table_report(result, ctx, folder)
    console.print(f"report: {md}  ({ctx['wall_seconds'] / 60:.1f} min)")


def main() -> None:  # pragma: no cover - entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
