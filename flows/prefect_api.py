"""The Prefect API a command's flows report to: the configured server, or one temporary server per command.

With ``PREFECT_API_URL`` set (a ``prefect server start`` elsewhere, Prefect Cloud, the tests' harness) that server
is used and must answer: one error line names it otherwise, and no temporary server starts in its place. Without
it, Prefect starts a temporary server the first time a flow of the process needs one and reuses it for every later
flow of the process; :func:`prefect_api` starts it before the first flow instead, on a database seeded from a
migrated template (:mod:`registry.prefect_db`), and imports what the flows' steps will need while the server boots
on the other core (docs/design.md §7.12). It runs after the run is planned: bad input is refused before any server
starts (docs/design.md §7.9).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from pathlib import Path

from components.errors import ConfigError
from flows.env import configure_environment
from registry.prefect_db import seed_prefect_database

__all__ = ["WARM_UP", "prefect_api"]

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


def _start_temporary_server() -> str:
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import Settings

    server = SubprocessASGIServer()  # Prefect's one temporary server of this process (get_client finds it)
    if server.running:
        return server.api_url
    # the server's database, as the server will read its settings (the environment configure_environment set)
    database = Settings().server.database.connection_url.get_secret_value()
    failed: list[BaseException] = []

    def boot() -> None:
        try:
            seed_prefect_database(database)
            server.start()  # waits until the server answers
        except BaseException as err:
            failed.append(err)

    thread = threading.Thread(target=boot, name="prefect-server-start", daemon=True)
    thread.start()
    _warm_up()
    thread.join()
    if failed:
        raise failed[0]
    return server.api_url


def prefect_api(home: Path) -> str:
    """Configure the process for Prefect (:func:`~flows.env.configure_environment`) and make sure the API its flows
    report to answers: the configured server, or the temporary one, started now once for the whole command. Its URL.
    """
    configure_environment(home)
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        _check_answers(url)
        return url
    return _start_temporary_server()
