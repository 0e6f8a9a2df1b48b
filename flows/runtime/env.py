"""Process environment for a bctflow command: workspace-local Prefect, no telemetry, no tracebacks for known errors.

Prefect reads its settings once, when it is first imported, which may be before a command calls
:func:`configure_environment` (its plan may import Prefect): what is set here reaches the processes a command starts
(Prefect's temporary server reads this environment) and the settings :mod:`flows.runtime.prefect_api` reads fresh. The
console script sets the startup timeout's default before anything imports Prefect (bctflow/cli.py).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from components.errors import BctflowError, ConfigError

__all__ = [
    "STARTUP_TIMEOUT_S",
    "STARTUP_TIMEOUT_VAR",
    "KnownErrorFilter",
    "configure_environment",
    "quiet_environment",
    "startup_timeout",
]

#: the loggers Prefect reports a failed task or flow run with (``logger.exception``: message + traceback)
RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs")

#: no phone-home, no progress noise in logs (each is only a default: the user's environment wins)
QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "DVC_NO_ANALYTICS": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "GIT_PYTHON_REFRESH": "quiet",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # gRPC's C core (Milvus Lite's server and its clients run in a command's process) printed its INFO lines on the
    # console ("fork_posix.cc … skipping fork() handlers" at each DataLoader fork): its documented default, read once
    # when grpc is first imported (the console script sets these first)
    "GRPC_VERBOSITY": "ERROR",
}


#: Prefect's own setting of how long its temporary server may take to answer
STARTUP_TIMEOUT_VAR = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
#: bctflow's default for it: Prefect's 20 s is too short for a loaded machine (its start took 18–32 s at load 5–10)
STARTUP_TIMEOUT_S = 120


def startup_timeout() -> int:
    """The seconds the temporary Prefect server may take to answer: the user's
    ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``, else 120 (then set in the environment, for Prefect too).
    ConfigError for a value that is not a whole number of seconds ≥ 1 (Prefect's own import fails on some with a
    traceback, so the console script checks it first)."""
    text = os.environ.setdefault(STARTUP_TIMEOUT_VAR, str(STARTUP_TIMEOUT_S))
    try:
        seconds = int(text)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise ConfigError(
            f"{STARTUP_TIMEOUT_VAR}={text!r}: the temporary Prefect server's startup timeout must be a whole number "
            f"of seconds ≥ 1; set e.g. {STARTUP_TIMEOUT_VAR}=300, or unset it (default {STARTUP_TIMEOUT_S})"
        )
    return seconds


def quiet_environment() -> None:
    """Switch off telemetry and progress noise of Prefect, MLflow, DVC and GitPython."""
    for key, value in QUIET.items():
        os.environ.setdefault(key, value)


class KnownErrorFilter(logging.Filter):
    """Drops the traceback from Prefect's report of a run that failed with a bctflow error.

    A :class:`~components.errors.BctflowError` already says what is wrong and how to fix it, and the CLI prints
    it as its one ``error:`` line; Prefect's report keeps its one-line message (in the console and the Prefect UI).
    Any other exception is a bug and keeps its traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], BctflowError):
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_known_failures() -> None:
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, KnownErrorFilter) for f in logger.filters):
            logger.addFilter(KnownErrorFilter())  # survives Prefect's dictConfig, which adds filters, never clears


def configure_environment(home: Path) -> None:
    """Keep Prefect's ephemeral server state under the workspace and switch off phone-home."""
    if "PREFECT_API_URL" not in os.environ:  # a real Prefect server keeps its own state
        os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
        Path(os.environ["PREFECT_HOME"]).mkdir(
            parents=True, exist_ok=True
        )  # the ephemeral server keeps its database there
    startup_timeout()
    quiet_environment()
    _quiet_known_failures()
