"""The DVC pipeline's commands: ``bctflow pipeline`` writes dvc.yaml from params.yaml, ``bctflow stage data`` and
``bctflow stage generation NAME`` are what its stages run (docs/design.md §7.15)."""

from __future__ import annotations

from pathlib import Path

import typer

from bctflow.shell import ParamsOpt, app, console, fail, parse_params
from components.errors import BctflowError, ConfigError

stage_app = typer.Typer(
    no_args_is_help=True, help="The stages of dvc.yaml (`dvc repro` runs them; see `bctflow pipeline`)."
)
app.add_typer(stage_app, name="stage")

DVC_YAML = Path("dvc.yaml")


@app.command()
def pipeline(
    params: Path = ParamsOpt,
    write_dvc_yaml: bool = typer.Option(
        False, "--write-dvc-yaml", help="write ./dvc.yaml (one DVC stage per generation of params.yaml)"
    ),
) -> None:
    """Print the dvc.yaml that params.yaml's `generations:` make, or write it (`--write-dvc-yaml`)."""
    import yaml

    from flows.pipeline.dvc_yaml import dvc_yaml
    from flows.pipeline.dvc_yaml import write_dvc_yaml as write_yaml

    p = parse_params(params, None)  # one clear error for a bad params.yaml
    try:
        if write_dvc_yaml:
            write_yaml(DVC_YAML, params)
            console.print(f"wrote {DVC_YAML.resolve()}; run it: dvc repro")
            return
        typer.echo(dvc_yaml(p, yaml.safe_load(params.read_text()) or {}), nl=False)
    except BctflowError as err:
        fail(err)


def _check_pipeline(params: Path) -> None:
    """A stage refuses to run from a dvc.yaml that params.yaml no longer generates."""
    from flows.pipeline.dvc_yaml import check_dvc_yaml

    if DVC_YAML.exists():
        check_dvc_yaml(DVC_YAML, params)


@stage_app.command("data")
def data_stage(
    out: Path = typer.Option(Path("outputs/data"), "--out", help="folder for one manifest per declared generation"),
    params: Path = ParamsOpt,
) -> None:
    """The `data` stage: write the data manifest of every generation params.yaml declares."""
    from flows.generation.chain import write_manifests
    from flows.pipeline.dvc_stage import stage_params
    from flows.runtime.workspace import Workspace, resolve_home

    p = parse_params(params, None)
    try:
        _check_pipeline(params)
        paths = write_manifests(stage_params(p), Workspace(resolve_home(None)), out)
    except BctflowError as err:
        fail(err)
    for path in paths:
        console.print(f"wrote {path}")


@stage_app.command("generation")
def generation_stage(
    name: str = typer.Argument(..., help="the generation of params.yaml `generations:` to run"),
    home: Path = typer.Option(..., "--home", help="the stage's workspace (empty: DVC cleared it)"),
    manifest: Path = typer.Option(..., "--manifest", help="the data stage's manifest this generation must train on"),
    results: Path = typer.Option(..., "--results", help="folder for metrics.json, training.csv, compatibility.json"),
    parent: Path | None = typer.Option(None, "--parent", help="the parent stage's workspace, copied into --home"),
    params: Path = ParamsOpt,
) -> None:
    """A generation's stage: copy the parent's workspace, run the generation in it, check it trained on the data
    stage's manifest, write its results."""
    from bctflow.generations import run_generation
    from flows.pipeline.dvc_stage import prepare_workspace, stage_params, used_manifest, write_results

    p = parse_params(params, None)
    h = home.resolve()
    try:
        _check_pipeline(params)
        p = stage_params(p)
        chain = p.declared_chain()
        spec = p.generation(name)
        before = [str(s.name) for s in chain[: chain.index(spec)]]
        if (parent is None) != (not before):
            raise ConfigError(
                f"generation {name} is number {len(before)} of the chain: "
                + ("pass --parent, the workspace of its predecessor" if before else "it has no parent, drop --parent")
            )
        if not manifest.is_file():
            raise ConfigError(f"the data manifest {manifest} does not exist; the data stage writes it: run `dvc repro`")
        prepare_workspace(h, parent.resolve() if parent else None, p, before)
    except BctflowError as err:
        fail(err)
    summary = run_generation(p, h, spec)
    try:
        if used_manifest(h, summary["generation"]) != manifest.read_text():
            raise ConfigError(
                f"generation {name} trained on data that differs from {manifest} (the data stage's manifest); "
                "run `dvc repro` again"
            )
        paths = write_results(p, h, name, results)
    except BctflowError as err:
        fail(err)
    console.print("wrote " + ", ".join(str(x) for x in paths))
