"""Process environment for a bctflow command: workspace-local Prefect, no telemetry, no tracebacks for known errors.

Must run before prefect is imported (Prefect reads its settings at import).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from components.errors import BctflowError

__all__ = ["KnownErrorFilter", "configure_environment", "quiet_environment"]

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
}


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
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    quiet_environment()
    _quiet_known_failures()
