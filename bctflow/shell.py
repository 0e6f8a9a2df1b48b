"""The command line's shell: the typer app, its consoles and shared options, and how a command fails.

Every command parses params.yaml once (:func:`parse_params`) and reports bad input as one red line
(:func:`fail`, exit code 2) before any Prefect server starts. Without ``--params``, a command reads ./params.yaml,
or, where there is none (outside a repository), the defaults the package ships (:func:`params_file`).
The command modules import what a command needs inside it, never at module level: ``--version`` and every
``--help`` start without torch, Prefect, MLflow, DVC or FAISS (tests/bctflow/test_cli.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from bctflow import __version__
from components.errors import BctflowError
from flows.params import DEFAULT_PARAMS_PATH, PACKAGED_PARAMS_PATH, Params, load_params

if TYPE_CHECKING:
    from components.evaluation.lineage_timeline import Timeline

__all__ = [
    "HomeOpt",
    "ParamsOpt",
    "SetOpt",
    "announce_params",
    "app",
    "console",
    "err_console",
    "error_line",
    "fail",
    "finish",
    "lineage_of",
    "params_file",
    "parse_params",
    "timeline_of",
]


def _flags_take_no_value() -> None:
    """typer's help shows a flag's type as if it took a value (``--reset <bool>``, ``--help <bool>``); a flag takes
    none, so its type column stays empty (every command's help, typer's own ``--help`` and completion flags too)."""
    shown = typer.core.TyperOption.display_type_rich

    def display_type_rich(self: typer.core.TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    typer.core.TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()
app = typer.Typer(no_args_is_help=True, help="Backward-compatible embedding lifecycle.")  # + shell completion
# piped output (CI logs, `| tee`) gets 140 columns instead of rich's default 80
console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        console.print(f"bctflow {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print bctflow's version and exit"
    ),
) -> None:
    """Backward-compatible embedding lifecycle."""


def params_file(ctx: typer.Context, value: Path | None) -> Path:
    """The params file of a command: ``--params``, else ./params.yaml, else the defaults the package ships."""
    if value is not None:
        return value
    return DEFAULT_PARAMS_PATH if DEFAULT_PARAMS_PATH.exists() or ctx.resilient_parsing else PACKAGED_PARAMS_PATH


def announce_params(path: Path) -> None:
    """One line on stderr when a command reads the packaged defaults (stdout stays the command's own, e.g.
    ``lineage --json``)."""
    if path != PACKAGED_PARAMS_PATH:
        return
    err_console.print(
        f"no ./params.yaml here and no --params: using the defaults bctflow ships ({PACKAGED_PARAMS_PATH})",
        soft_wrap=True,
        highlight=False,
    )


HomeOpt = typer.Option(None, "--home", help="workspace directory (default: $BCTFLOW_HOME or ./.bctflow)")
ParamsOpt = typer.Option(
    None,
    "--params",
    callback=params_file,
    show_default=False,
    help="params.yaml to use (default: ./params.yaml, else the defaults bctflow ships)",
)
SetOpt = typer.Option(
    None, "--set", metavar="KEY=VALUE", help="override a parameter, e.g. --set train.epochs=5 (repeatable)"
)


def report_finished(findings: list) -> None:
    """One line per step of an interrupted commit that was finished now (flows.recovery.reconcile.Finding)."""
    for f in findings:
        console.print(f"finished an interrupted commit: {f.what}", highlight=False)


def error_line(err: Exception) -> None:
    """The one red ``error:`` line of a refusal, on stderr."""
    err_console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True, highlight=False)


def fail(err: Exception) -> None:
    error_line(err)
    raise typer.Exit(2)


def parse_params(path: Path, overrides: list[str] | None, values: dict[str, Any] | None = None) -> Params:
    """params.yaml with ``--set`` overrides and the command's typed options (``values`` by dotted key; None: not
    given), parsed once; bad input fails with one line."""
    announce_params(path)
    try:
        return load_params(path, overrides, {k: v for k, v in (values or {}).items() if v is not None})
    except BctflowError as err:
        fail(err)
        raise  # unreachable: _fail exits


def finish(run: Callable[[], Any], what: str) -> Any:
    """Run the flow (``run`` returns its final state) and return its result, or one clear error line and a non-zero
    exit: a BctflowError as :func:`fail` reports it; a Prefect API that stopped answering mid-run (its temporary
    server killed, e.g. by the OOM killer on a loaded machine, or a configured one gone) as what happened and the
    way on — exit 1, staged work kept; any other failure as its type and message."""
    import httpx

    try:
        state = run()
    except httpx.TransportError as err:  # Prefect's client, after its own retries
        logging.raiseExceptions = False  # Prefect's log shipper would print its failed sends at exit, line by line
        why = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else 'no answer'}"
        err_console.print(
            f"[bold red]{what} stopped:[/] the Prefect API ({_api_url()}) stopped answering ({escape(why)}); staged "
            "work is kept: run the same command again (a temporary server starts anew), or point PREFECT_API_URL "
            "at a running `prefect server start`",
            soft_wrap=True,
            highlight=False,
        )
        raise typer.Exit(1) from None
    if state.is_failed():
        try:
            state.result()
        except BctflowError as err:
            fail(err)
        except Exception as err:
            err_console.print(
                f"[bold red]{what} failed:[/] {type(err).__name__}: {escape(str(err))}", soft_wrap=True, highlight=False
            )
            raise typer.Exit(1) from None
    return state.result()


def _api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    return PREFECT_API_URL.value() or "this command's temporary server"


def lineage_of(params: Params, home: Path) -> list[dict[str, Any]]:
    """The ``bctflow lineage --json`` document of the workspace at ``home``."""
    from flows.runtime.workspace import Workspace

    with Workspace(home).lineage(params, readonly=True) as store:
        return store.to_json()


def timeline_of(params: Params, home: Path, metric: str | None = None) -> Timeline:
    """The lineage's timeline (generations and backfills in the order they happened) of the workspace at ``home``;
    ``metric``: the metric of its generations' cross and old-old values (None: none)."""
    from flows.runtime.workspace import Workspace

    with Workspace(home).lineage(params, readonly=True) as store:
        return store.timeline(metric)
