"""Where a run comes from: the Prefect flow run that executes it and the git commit of the code (docs/design.md §7.17).

The MLflow run of a generation is tagged with both; the Prefect flow run's artifact links back to the MLflow run.
A URL is given only where it can be opened: the Prefect UI's when a Prefect server was configured
(``PREFECT_API_URL``, or ``PREFECT_UI_URL`` for a UI elsewhere) — the temporary server a command starts without one
is gone when the command ends — and the MLflow UI's where the tracking store is a server (``http(s)://``); for a
database store (the workspace's default) the link is the page's path under ``mlflow ui``'s default address.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["MLFLOW_UI", "git_commit", "mlflow_run_url", "prefect_flow_run"]

#: where ``mlflow ui`` serves by default (a database tracking store has no URL of its own)
MLFLOW_UI = "http://127.0.0.1:5000"


def prefect_flow_run() -> dict[str, str]:
    """Tags naming the Prefect flow run this code runs in: id, name and (with a configured server) its UI URL.
    Empty outside a flow run."""
    from prefect.runtime import flow_run
    from prefect.utilities.urls import url_for

    run_id = flow_run.id
    if run_id is None:
        return {}
    tags = {"prefect.flow_run_id": str(run_id), "prefect.flow_run_name": str(flow_run.name)}
    if os.environ.get("PREFECT_API_URL") or os.environ.get("PREFECT_UI_URL"):
        url = url_for("flow-run", obj_id=str(run_id))  # the page Prefect's own "View at" log line names
        if url:
            tags["prefect.flow_run_url"] = str(url)
    return tags


def git_commit(root: Path | None = None) -> dict[str, str]:
    """MLflow's git tags for the code's checkout (commit; ``bctflow.git_dirty``: uncommitted changes to tracked
    files). Empty where the code is not a git checkout (an installed wheel) or git is not installed."""
    import components

    base = root if root is not None else Path(components.__file__).resolve().parent.parent
    if not (base / ".git").exists():
        return {}
    try:
        head = subprocess.run(
            ["git", "-C", str(base), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(base), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"mlflow.source.git.commit": head, "bctflow.git_dirty": str(bool(dirty)).lower()}


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI page of a run: on the tracking server itself, else under ``mlflow ui``'s default address."""
    base = tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else MLFLOW_UI
    return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
