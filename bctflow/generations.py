"""Commands that create generations or show them: demo, run, chain, snapshot, lineage."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from bctflow.choices import Alignment
from bctflow.shell import (
    HomeOpt,
    ParamsOpt,
    SetOpt,
    app,
    console,
    err_console,
    fail,
    finish,
    lineage_of,
    parse_params,
    report_finished,
    timeline_of,
)
from components.errors import BctflowError, ConfigError
from flows.params import GenerationSpec, Params, params_digest
from flows.runtime.lock import NEW_GENERATION, workspace_lock

if TYPE_CHECKING:
    from registry.lineage import LineageDB


def _already_committed(store: LineageDB, params: Params, spec: GenerationSpec | None) -> int | None:
    """The asked-for generation when the newest in the lineage already is it, made from the same model-shaping
    parameters: the same command, run again after its commit (e.g. once killed after the commit point)."""
    if spec is None:
        return None
    gens = store.generations()
    newest = gens[-1] if gens else None
    same = newest is not None and newest.name == spec.name and newest.params_digest == params_digest(params)
    return newest.id if same else None


def run_generation(params: Params, home: Path, spec: GenerationSpec | None) -> dict[str, Any]:
    """Plan (the run's only plan; refuses bad input before any server starts), then run the flow. The lineage is
    read in one session before the flow (an interrupted commit, a finished rerun, the plan), once under the
    workspace lock and written once at the commit; the result carries the committed lineage (``lineage``). The
    workspace lock is taken before the Prefect server starts and held through the flow (which re-enters it)."""
    from flows.planning import make_plan
    from flows.recovery.reconcile import finish_interrupted
    from flows.runtime.prefect_api import prefect_api
    from flows.runtime.workspace import Workspace

    with contextlib.ExitStack() as held:
        try:
            with Workspace(home).lineage(params, readonly=True) as store:
                report_finished(finish_interrupted(params, home, store))
                done = _already_committed(store, params, spec)
                if done is not None:
                    console.print(
                        f"generation {done} ({spec.name}) is already committed with these parameters; nothing to do"
                    )
                    return {"generation": done, "lineage": store.to_json()}
                plan = make_plan(params, home, spec, store=store)
            held.enter_context(workspace_lock(home, NEW_GENERATION, params.lineage.db_url))  # busy: one line, now
            prefect_api(home)  # the configured server, or this command's one temporary server (started once)
        except BctflowError as err:
            fail(err)
        from flows.generation.flow import new_generation

        return finish(lambda: new_generation(plan, return_state=True), "generation")


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


def radius_health(diag: dict) -> str:
    """One line of a Lorentz generation's radius diagnostics: how much of its gallery (and its parent's) sits at the
    bound ζ, the parent's mean uncertainty on seen / unseen classes, and, for HBCT, the share of new points inside
    their old point's entailment cone."""
    nan = float("nan")
    line = (
        "radius health: clip fraction (gallery, new/parent) "
        f"{diag.get('clip_fraction_gallery', nan):.2f}/{diag.get('clip_fraction_gallery_parent', nan):.2f}, "
        "parent uncertainty seen/unseen "
        f"{diag.get('uncertainty_parent_seen', nan):.3f}/{diag.get('uncertainty_parent_unseen', nan):.3f}"
    )
    cone = diag.get("in_cone_fraction")
    return line + (f", in-cone {cone:.3f}" if cone is not None and math.isfinite(cone) else "")


@app.command()
def demo(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    reset: bool = typer.Option(False, "--reset", help="wipe an existing bctflow workspace first"),
    set_: list[str] | None = SetOpt,
) -> None:
    """Fresh workspace, then every generation of params.yaml `generations:` on digits (the shipped params.yaml: g0 on
    classes 0–4, then g1 on all classes with HBCT + an independent reference)."""
    from bctflow.tables import compat_table, decision_warnings, retrieval_table
    from flows.runtime.workspace import Workspace, resolve_home

    h = resolve_home(home)
    ws = Workspace(h)
    p = parse_params(params, ["data.dataset=digits", *(set_ or [])])
    try:
        chain = p.declared_chain()
        if not ws.is_empty():
            if not reset:
                raise ConfigError(
                    f"workspace {h} is not empty; pass --reset to wipe it or --home to use another directory"
                )
            ws.reset(p)
    except BctflowError as err:
        fail(err)
    t0 = time.perf_counter()
    gens: list[dict[str, Any]] = []
    for i, spec in enumerate(chain):
        method = "independent" if i == 0 else spec.alignment or p.alignment.method  # generation 0: base loss only
        console.rule(f"[bold]generation {spec.name}: {method} on classes {spec.classes}")
        gens = run_generation(p, h, spec)["lineage"]
    wall = time.perf_counter() - t0
    console.print(retrieval_table(gens))
    console.print(compat_table(gens))
    g1 = gens[-1]
    if g1["parent"] is not None and g1["backfill_required"]:  # (a chain of one generation has no parent)
        console.print(f"[yellow]g{g1['id']}: backfill required[/] — " + "; ".join(g1["backfill_reasons"]))
    elif g1["parent"] is not None:
        served = "promoted: it serves" if g1["production"] else "not promoted: it does not serve"
        console.print(f"g{g1['id']}: no backfill required — {served} the live gallery of g{g1['parent']}")
    for warning in decision_warnings(g1):
        console.print(f"[yellow]g{g1['id']} warning:[/] {warning}")
    diag = g1.get("diagnostics") or {}
    if diag:
        console.print(radius_health(diag))
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
    alignment: Alignment | None = typer.Option(None, "--alignment", help="alignment method (default alignment.method)"),
    epochs: int | None = typer.Option(
        None, "--epochs", min=1, help="training epochs of this generation (default train.epochs)"
    ),
    reference: bool | None = typer.Option(
        None, "--reference/--no-reference", help="also train an independent reference (P_com, P_up)"
    ),
    nproc: int | None = typer.Option(
        None, "--nproc", min=1, help="train on N data-parallel processes per node (DDP; default train.nproc)"
    ),
    nnodes: int | None = typer.Option(
        None, "--nnodes", min=1, help="nodes of a multi-node training (the others run `bctflow train-node`)"
    ),
    rdzv_endpoint: str | None = typer.Option(
        None, "--rdzv-endpoint", help="host:port of the multi-node rendezvous on this node"
    ),
    set_: list[str] | None = SetOpt,
) -> None:
    """Create one new generation, aligned to the generation that embedded the live gallery."""
    from bctflow.tables import compat_table, retrieval_table
    from flows.runtime.workspace import resolve_home

    h = resolve_home(home)
    launch = {"train.nproc": nproc, "train.nnodes": nnodes, "train.rdzv_endpoint": rdzv_endpoint}
    p = parse_params(params, set_, launch)
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
        fail(err)
    except ValueError as err:
        fail(ConfigError(str(err)))
    summary = run_generation(p, h, spec)
    gens = [g for g in summary["lineage"] if g["id"] == summary["generation"]]
    console.print(retrieval_table(gens))
    if gens and gens[0]["parent"] is not None:
        console.print(compat_table(gens))


@app.command("train-node")
def train_node(
    home: Path | None = HomeOpt,
    job_dir: Path | None = typer.Option(
        None, "--job-dir", help="the leader's job folder (default <home>/jobs, the workspace on shared storage)"
    ),
    once: bool = typer.Option(False, "--once", help="return after one training job"),
) -> None:
    """Another node of a multi-node training: join every training job the leader (`bctflow run --nnodes N`)
    publishes, with this node's ranks (the job says how many)."""
    import logging
    import os

    # the leader hosts the rendezvous store and may close it before this node's agent says goodbye: that late
    # goodbye fails harmlessly, with a C++ stack trace and a warning, on every job
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    logging.getLogger("torch.distributed.elastic.rendezvous.dynamic_rendezvous").setLevel(logging.ERROR)
    from components.training.launch import serve_node
    from flows.runtime.workspace import Workspace, resolve_home

    folder = job_dir or Workspace(resolve_home(home)).jobs_dir
    console.print(f"waiting for training jobs in {folder} (Ctrl-C stops)")
    try:
        serve_node(folder, once=once, log=lambda m: console.print(m, highlight=False, markup=False))
    except BctflowError as err:
        fail(err)


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
    from flows.generation.chain import flat_metrics
    from flows.runtime.workspace import Workspace, resolve_home
    from registry.data_snapshots import DataSnapshots

    h = resolve_home(home)
    p = parse_params(params, set_)
    try:
        declared = p.declared_chain()
    except BctflowError as err:
        fail(err)
    done = {g["name"] for g in lineage_of(p, h)}
    for spec in declared:
        if spec.name in done:
            console.print(f"generation {spec.name} already in the lineage, skipping")
            continue
        console.rule(f"[bold]generation {spec.name}")
        summary = run_generation(p, h, spec)
        if expect_data is not None:
            used = DataSnapshots(Workspace(h).data_dir).load(f"gen_{summary['generation']:03d}")
            if used.to_json() != (expect_data / f"{spec.name}.json").read_text():
                fail(
                    ConfigError(
                        f"generation {spec.name} trained on data that differs from "
                        f"{expect_data / (spec.name + '.json')}; run `dvc repro` from a clean workspace"
                    )
                )
    gens = lineage_of(p, h)
    console.print(lineage_table(gens, timeline_of(p, h)))
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
    """Write the data manifest of every generation declared in params.yaml (what `bctflow chain --expect-data`
    checks; the `data` stage of dvc.yaml runs `bctflow stage data`)."""
    from flows.generation.chain import write_manifests
    from flows.runtime.workspace import Workspace, resolve_home

    p = parse_params(params, set_)
    try:
        paths = write_manifests(p, Workspace(resolve_home(home)), out)
    except BctflowError as err:
        fail(err)
    for path in paths:
        console.print(f"wrote {path}")


@app.command()
def lineage(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    as_json: bool = typer.Option(False, "--json", help="print the lineage as JSON (schema: docs/lineage-json.md)"),
    png: Path | None = typer.Option(
        None,
        "--png",
        metavar="PATH",
        help="also write the lineage picture (each generation's state, with a legend) as a PNG to PATH",
    ),
) -> None:
    """Show the lineage: generations, ζ, metrics, backfill decisions, the live gallery."""
    from bctflow.tables import compat_table, lineage_table
    from flows.runtime.workspace import resolve_home

    h = resolve_home(home)
    p = parse_params(params, None)
    try:
        if png is not None and png.is_dir():
            raise ConfigError(f"--png {png} is a directory; give the PNG file to write, e.g. --png {png}/lineage.png")
        gens, timeline = lineage_of(p, h), timeline_of(p, h, p.backfill.rules.metric)
    except BctflowError as err:
        fail(err)
    if not gens:
        fail(BctflowError(f"no lineage in {h}; run `bctflow demo` or `bctflow run` first, or pass --home"))
    if png is not None:
        from components.evaluation.lineage_plot import lineage_picture

        try:
            png.parent.mkdir(parents=True, exist_ok=True)
            n, b = len(timeline.generations), len(timeline.backfills)
            lineage_picture(png, timeline, f"bctflow lineage as committed: {n} generation(s), {b} backfill(s)")
        except OSError as err:
            fail(ConfigError(f"--png {png}: cannot write it ({err.strerror or err}); pick a path you can write"))
        err_console.print(f"wrote the lineage picture to {png}", soft_wrap=True, highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(gens, indent=2, default=str) + "\n")
        return
    console.print(lineage_table(gens, timeline))
    console.print(compat_table(gens))
