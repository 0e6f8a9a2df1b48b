"""The `bctflow` command line (typer): a thin shell over flows/ (and benchmarks/ for `bench`).

Each command parses params.yaml once and, for a generation or a backfill, makes
the run's one plan before any Prefect server starts, so bad input fails fast
and writes nothing. The commands live in :mod:`bctflow.generations`, :mod:`bctflow.bench`,
:mod:`bctflow.live` and :mod:`bctflow.operations`; importing them registers them on the app.
"""

from __future__ import annotations

import atexit
import os
import sys

from bctflow import bench, generations, live, operations, serve, stages, upgrade  # noqa: F401 (registers the commands)
from bctflow.interrupt import install_interrupt_handlers
from bctflow.shell import app, error_line
from components.errors import BctflowError
from flows.runtime.env import quiet_environment, startup_timeout
from flows.runtime.progress import use_rich_logging

__all__ = ["app", "main"]


def main() -> None:
    """The ``bctflow`` console script: the Prefect setting bctflow documents checked before Prefect is imported (a bad
    value would fail its import with a traceback), the quiet defaults set before any library reads them
    (:func:`~flows.runtime.env.quiet_environment`); on a terminal, log lines print above the progress bars (one rich
    console, :mod:`flows.runtime.progress`); Ctrl-C / SIGTERM stop it cleanly (:mod:`bctflow.interrupt`); then the
    app."""
    try:
        startup_timeout()
    except BctflowError as err:
        error_line(err)
        raise SystemExit(2) from None
    quiet_environment()
    use_rich_logging()
    install_interrupt_handlers()
    try:
        app()
    except SystemExit as done:
        _exit_now(done.code)
    _exit_now(0)


def _exit_now(code: int | str | None) -> None:
    """End the process with ``code`` once its exit hooks ran (Prefect's temporary server stopped, the log handlers
    flushed, a backfill's command seconds written) and its output is flushed — without the interpreter's
    finalization, which took 3.4 s after the last exit hook of a tiny backfill (tearing down torch, Prefect, MLflow
    and the rest module by module): nothing is left to save by then, and a kill at any moment is what the lifecycle
    survives anyway. An uncaught exception still ends the usual way (its traceback)."""
    if isinstance(code, str):  # SystemExit("message"): Python prints it and exits 1
        sys.stderr.write(code + "\n")
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


if __name__ == "__main__":  # pragma: no cover
    main()
