"""The Prefect API a command's flows report to: the configured server, or one temporary server per command.

With ``PREFECT_API_URL`` set (a ``prefect server start`` elsewhere, Prefect Cloud, the tests' harness) that server
is used and must answer: one error line names it otherwise, and no temporary server starts in its place. Without
it, Prefect starts a temporary server the first time a flow of the process needs one and reuses it for every later
flow of the process; :func:`prefect_api` starts it before the first flow instead, on a database seeded from a
migrated template (:mod:`registry.prefect_db`), and imports what the flows' steps will need while the server boots
on the other core (docs/design.md §7.12). It runs after the run is planned: bad input is refused before any server
starts (docs/design.md §7.9).

The temporary server may take ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` to answer (120 s unless the user
sets it; Prefect's 20 s failed under load), and a start that does not answer in time is stopped and tried once more;
then one error line says what happened and the three ways out. On Linux the server's process dies with the
command's, even after a ``kill -9`` of the command (the parent-death signal, armed in the server's process).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.errors import ConfigError
from components.processes import stop_descendants, stopping_descendants
from flows.runtime.env import STARTUP_TIMEOUT_VAR, configure_environment, startup_timeout
from registry.prefect_db import seed_prefect_database

__all__ = ["STARTS", "WARM_UP", "cluster_api", "prefect_api"]

#: starts of the temporary server before a command gives up (each waits up to the startup timeout)
STARTS = 2
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: seconds a dead server's watch waits for the command's own signal handler (a Ctrl-C reaches the server too)
_OWN_STOP_S = 2.0

#: what the flows' steps import on first use (registration, the data snapshot, the plots) and MLflow's map of the
#: installed packages (its first model log checks the model's pip requirements against it: seconds, once per
#: process): done while the temporary server boots in its own process instead of inside the steps after it booted.
#: (module, function to call or None); a name a release no longer has is skipped
WARM_UP = (
    ("mlflow.pyfunc", None),
    ("mlflow.store.tracking.sqlalchemy_store", None),
    ("mlflow.store.model_registry.sqlalchemy_store", None),
    ("mlflow.utils.requirements_utils", "_init_modules_to_packages_map"),
    ("dvc.repo", None),
    ("matplotlib.figure", None),
    ("matplotlib.backends.backend_agg", None),
)


def _check_answers(url: str) -> None:
    """ConfigError in one line unless the configured Prefect API answers its health check."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            err = client.api_healthcheck()
    except Exception as exc:
        err = exc
    if err is not None:
        why = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else 'no answer'}"
        raise ConfigError(
            f"the Prefect server at {url} (PREFECT_API_URL) does not answer ({why}); start it (`prefect server "
            "start`) or unset PREFECT_API_URL to let bctflow start a temporary one"
        )


def _warm_up() -> None:
    for module, call in WARM_UP:
        with contextlib.suppress(Exception):  # only ever an earlier start of what a step does anyway
            loaded = importlib.import_module(module)
            if call is not None:
                getattr(loaded, call)()


class _LaunchDyingWithCommand:
    """``subprocess`` as Prefect's server module sees it while it launches the server: its ``Popen`` arms Linux'
    parent-death signal in the child before Prefect runs there, so the kernel kills the server when the thread that
    started it ends — the command's main thread: when the command ends, even by ``kill -9``."""

    def __init__(self) -> None:
        self._parent = os.getpid()
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def _arm(self) -> None:  # in the child, between fork and exec
        self._prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != self._parent:  # the command died before the signal was armed
            os._exit(1)

    def Popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(*args, preexec_fn=self._arm, **kwargs)


def _server_class() -> type:
    """Prefect's temporary server, started in a process that dies with the command where Linux can arrange it (the
    death signal follows the starting thread: only the main thread lives as long as the command)."""
    from prefect.server.api.server import SubprocessASGIServer

    on_main = threading.current_thread() is threading.main_thread()
    return _dying_with_command() if sys.platform.startswith("linux") and on_main else SubprocessASGIServer


@functools.cache
def _dying_with_command() -> type:
    import prefect.server.api.server as server_module

    class DiesWithCommand(server_module.SubprocessASGIServer):
        _stopping = False

        def _run_uvicorn_command(self) -> subprocess.Popen:
            server_module.subprocess = _LaunchDyingWithCommand()  # Prefect's own launch of its server, armed
            try:
                return super()._run_uvicorn_command()
            finally:
                server_module.subprocess = subprocess

        _watched: subprocess.Popen | None = None

        def start(self, timeout: int | None = None) -> None:
            super().start(timeout)  # Prefect calls it again on each client it makes: started once
            process = self.server_process
            if process is not None and process is not self._watched:
                self._watched, self._stopping = process, False  # a new server (a second start after a failed one)
                threading.Thread(target=self._watch, args=(process,), name="prefect-server-watch", daemon=True).start()

        def stop(self) -> None:
            self._stopping = True  # the command's own stop (its end, a failed start): not a loss
            answering = self.running and self.server_process is not None and self.server_process.poll() is None
            if answering:
                _flush_to_api()
            super().stop()
            if answering:
                _detach_api_logs()

        def _watch(self, process: subprocess.Popen) -> None:
            process.wait()  # a signal's handler stopping the command's children is the command's own stop too
            if not self._stopping and not stopping_descendants(_OWN_STOP_S) and process is self.server_process:
                _server_lost(self.api_url, process)

    return DiesWithCommand


def _flush_to_api() -> None:
    """Send the logs and events still queued for the API while the server answers: at the command's end its server
    stops first (its exit hook was registered last), and logging's own exit hook then tried to ship them to the
    stopped server — 1.5 s of a tiny backfill, longer under load."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):  # a send that fails here is one the stopped server would not take
            worker.drain_all(timeout=5)


def _detach_api_logs() -> None:
    """Take Prefect's API log handlers off every logger: the server they send to has stopped."""
    from prefect.logging.handlers import APILogHandler

    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    for logger in loggers:
        for handler in [h for h in logger.handlers if isinstance(h, APILogHandler)]:
            logger.removeHandler(handler)


def _server_lost(url: str, process: subprocess.Popen) -> None:
    """The temporary server died under a running command (the OOM killer on a loaded machine, a stray kill): one
    line, the command's other children stopped, exit 1 — at once. Prefect's client would retry the dead API for
    minutes and then end in its traceback; a kill at any moment is what the lifecycle survives (docs/design.md
    §7.12), so the same command resumes the staged work."""
    code = process.returncode
    how = f"killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() else f"exit {code}"
    sys.stderr.write(
        f"error: this command's temporary Prefect server ({url}, pid {process.pid}) died mid-command ({how}; "
        "a loaded machine's OOM killer?); stopped here, staged work is kept: run the same command again, or point "
        "PREFECT_API_URL at a running `prefect server start`\n"
    )
    sys.stderr.flush()
    stop_descendants()
    os._exit(1)


def _did_not_start(err: Exception, timeout: int) -> ConfigError:
    exited = "exited with code" in str(err)  # Prefect's words when the server process ended before it answered
    why = "exited before it answered (its error is above)" if exited else f"did not answer within {timeout} s"
    return ConfigError(
        f"the temporary Prefect server {why}, in {STARTS} starts{'' if exited else ' (a busy machine?)'}; nothing ran "
        "and staged work is "
        f"kept: run the command again, raise {STARTUP_TIMEOUT_VAR} (now {timeout}), or point PREFECT_API_URL at a "
        "running `prefect server start`"
    )


def _start_temporary_server() -> str:
    from prefect.settings import Settings

    server = _server_class()()  # Prefect's one temporary server of this process (get_client finds it)
    if server.running:
        return server.api_url
    timeout = startup_timeout()  # read now: Prefect read its own settings when the command imported it
    # the server's database, as the server will read its settings (the environment configure_environment set)
    database = Settings().server.database.connection_url.get_secret_value()
    warm = threading.Thread(target=_warm_up, name="prefect-warm-up", daemon=True)
    warm.start()  # while the server boots in its own process
    try:
        seed_prefect_database(database)
        for _ in range(STARTS):
            try:
                server.start(timeout)  # waits until the server answers
                return server.api_url
            except Exception as err:  # Prefect's RuntimeError: no answer in time, or the process ended
                failed = err
                server.stop()  # the process that did not answer; the next start is a new server
                server = _server_class()()
        raise _did_not_start(failed, timeout)
    finally:
        warm.join()


def prefect_api(home: Path) -> str:
    """Configure the process for Prefect (:func:`~flows.runtime.env.configure_environment`) and make sure the API its
    flows
    report to answers: the configured server, or the temporary one, started now once for the whole command. Its URL.
    """
    configure_environment(home)
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        _check_answers(url)
        return url
    return _start_temporary_server()


@contextlib.contextmanager
def cluster_api() -> Iterator[None]:
    """The API a Dask cluster's task runs report to, in the settings they carry to the workers (prefect-dask sends
    the submitting context): the configured server, or this command's temporary one by its URL — a worker handed no
    URL would start a temporary server of its own, and its task runs would not show in the command's flow run."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = _server_class()()
    if PREFECT_API_URL.value() or not server.running:
        yield
        return
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield
