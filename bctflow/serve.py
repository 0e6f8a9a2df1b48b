"""`bctflow serve` (the query service over the live gallery) and `bctflow bench serve` (its benchmark).

FastAPI, uvicorn and torch are imported inside the commands: `bctflow --help` stays light.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from bctflow.bench import bench_app
from bctflow.shell import HomeOpt, ParamsOpt, SetOpt, app, console, fail, parse_params
from components.errors import BctflowError


@app.command()
def serve(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind (anything but loopback needs a token)"),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port"),
    set_: list[str] | None = SetOpt,
) -> None:
    """Answer image and vector queries over the live gallery (HTTP); swaps to a new live version without downtime."""
    from flows.runtime.workspace import Workspace, resolve_home
    from flows.serving.run import serve as run_service

    p = parse_params(params, set_)
    try:
        run_service(Workspace(resolve_home(home)), p, host, port, announce=lambda line: console.print(line))
    except BctflowError as err:
        fail(err)


@bench_app.command("serve")
def bench_serve(
    out: Path = typer.Option(Path("benchmarks/results/serve"), "--out", help="where serve.json and report.md go"),
    work: Path = typer.Option(
        Path(".bctflow/bench-serve"), "--work", help="scratch folder: the cached corpus and the benchmark workspace"
    ),
    items: int = typer.Option(100_000, "--items", min=1000, help="gallery items (the scale corpus)"),
    index: str = typer.Option("hnsw", "--index", help="the gallery's index type: hnsw or ivf"),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="vector requests in flight at once"),
    image_concurrency: int = typer.Option(
        32,
        "--image-concurrency",
        min=1,
        help="image requests in flight at once (two batches' worth: one embedded while the next is collected)",
    ),
    seconds: float = typer.Option(10.0, "--seconds", min=1.0, help="length of each measured load phase"),
    profile: str = typer.Option("cpu", "--profile", help="benchmark profile for the models"),
    image_size: int | None = typer.Option(
        None,
        "--image-size",
        min=8,
        max=32,
        help="side of the corpus's images (Fashion-MNIST resized, 28 = its own; default: the profile's)",
    ),
    reuse: bool = typer.Option(
        False,
        "--reuse",
        help="start from the workspace an earlier run with the same params prepared in --work (g0, g1 and the "
        "published backfill), instead of building it again",
    ),
) -> None:
    """The query service under load: throughput, latency, batching and a swap in mid-run (serve.json + report.md)."""
    from benchmarks.serve import run_serve_bench

    command = "bctflow bench serve " + " ".join(sys.argv[3:])
    try:
        md = run_serve_bench(
            out,
            work,
            items=items,
            index_type=index,
            concurrency=concurrency,
            image_concurrency=image_concurrency,
            seconds=seconds,
            profile=profile,
            image_size=image_size,
            reuse=reuse,
            command=command.strip(),
            log=lambda line: console.print(line, highlight=False),
        )
    except BctflowError as err:
        fail(err)
    console.print(f"report: {md}")
