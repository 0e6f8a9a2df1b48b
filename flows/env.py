"""Process environment for a bctflow command: workspace-local Prefect, no telemetry.

Must run before prefect is imported (Prefect reads its settings at import).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["configure_environment", "quiet_environment"]

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


def configure_environment(home: Path) -> None:
    """Keep Prefect's ephemeral server state under the workspace and switch off phone-home."""
    if "PREFECT_API_URL" not in os.environ:  # a real Prefect server keeps its own state
        os.environ.setdefault("PREFECT_HOME", str(home / "prefect"))
        Path(os.environ["PREFECT_HOME"]).mkdir(
            parents=True, exist_ok=True
        )  # the ephemeral server keeps its database there
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    quiet_environment()
