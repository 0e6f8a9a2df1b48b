"""Commands that move what serves: ``promote`` (which generation the MLflow alias ``production`` names) and
``rollback`` (which retained gallery version the live gallery is), each gated and recorded in the lineage."""

from __future__ import annotations

from pathlib import Path

import typer

from bctflow.shell import HomeOpt, ParamsOpt, app, console, fail, parse_params
from components.errors import BctflowError
from flows.runtime.lock import ROLLBACK, workspace_lock


@app.command()
def promote(
    generation: int = typer.Argument(..., help="generation id to serve as `production`"),
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    force: bool = typer.Option(False, "--force", help="override a failed promotion gate (recorded in the lineage)"),
    by: str | None = typer.Option(None, "--by", help="who promotes (default: the login name)"),
    reason: str = typer.Option("", "--reason", help="why (recorded in the lineage)"),
) -> None:
    """Point the MLflow alias `production` at a generation (the gate applies unless --force; the production
    generation itself is left as it is)."""
    import getpass

    from flows.generation.promotion import promote as do_promote
    from flows.runtime.workspace import Workspace, resolve_home

    p = parse_params(params, None)
    try:
        res = do_promote(
            p, Workspace(resolve_home(home)), generation, force=force, by=by or getpass.getuser(), reason=reason
        )
    except BctflowError as err:
        fail(err)
    if res["already"]:
        console.print(
            f"generation {res['generation']} (version {res['version']}) is already production; nothing recorded"
        )
    else:
        console.print(
            f"generation {res['generation']} (version {res['version']}) is "
            f"production{' — FORCED past the gate' if res['forced'] else ''}; "
            f"recorded by {res['by']} at {res['at']}"
        )
    if not res["live_gallery_accepts_queries"]:
        console.print(
            f"[yellow]note:[/] the live gallery does not accept generation {generation}'s queries (not compatible with "
            "it); "
            f"run `bctflow backfill --generation {generation}` before serving its queries"
        )


@app.command()
def rollback(
    home: Path | None = HomeOpt,
    params: Path = ParamsOpt,
    to: int | None = typer.Option(
        None,
        "--to",
        help="the gallery version to restore (k of live/index-v<k>; 0: generation 0's gallery; default: "
        "the one live before the current one)",
    ),
    promote: int | None = typer.Option(
        None, "--promote", help="make this generation production with the rollback (one the version accepts)"
    ),
    by: str | None = typer.Option(None, "--by", help="who rolls back (default: the login name)"),
    reason: str = typer.Option("", "--reason", help="why (recorded in the lineage)"),
) -> None:
    """Point the live gallery back at a retained earlier version (it must accept production's queries, or --promote
    a generation it accepts)."""
    import getpass

    from flows.backfill.rollback import rollback as do_rollback
    from flows.runtime.workspace import Workspace, resolve_home

    h = resolve_home(home)
    p = parse_params(params, None)
    try:
        with workspace_lock(h, ROLLBACK, p.lineage.db_url):
            res = do_rollback(p, Workspace(h), to=to, promote=promote, by=by or getpass.getuser(), reason=reason)
    except BctflowError as err:
        fail(err)
    console.print(
        f"the live gallery is version {res.version} again (embedded by generation {res.generation}; it accepts "
        f"queries of generations {res.compatible_generations}), in place of version {res.previous}; "
        f"{res.seconds:.2f} s (the switch {res.switch_seconds:.2f} s); checked {res.checked}"
        + (f"; generation {promote} is production" if promote is not None else "")
    )
