"""The ``nightly-retrain`` flow: retrain only when data or parameters changed since the last generation.

Deployed by ``prefect.yaml`` (cron + timezone from params.yaml ``schedule:``) or
served by ``bctflow schedule --serve``.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.params import load_params_with
from flows.steps.changes import ChangeReport, detect_changes
from flows.steps.preflight import open_store_readonly
from flows.workspace import Workspace
from flows.new_generation import new_generation


@task(name="detect-changes", cache_policy=NO_CACHE)
def detect_task(home: str, params_path: str, overrides: list[str]) -> ChangeReport:
    params = load_params_with(params_path, overrides)
    ws = Workspace(home)
    store = open_store_readonly(params, ws)
    try:
        return detect_changes(params, ws, store)
    finally:
        store.close()


@flow(name="nightly-retrain", log_prints=True)
def nightly_generation(
    home: str = ".bctflow",
    params_path: str = "params.yaml",
    overrides: list[str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create a new generation if data or parameters changed since the newest one; otherwise exit early."""
    report = detect_task(home, params_path, list(overrides or []))
    log = get_run_logger()
    if not report.changed:
        log.info("nightly retraining skipped: %s", report.reason)
        return {"skipped": True, "reason": report.reason, "last_generation": report.last_generation}
    log.info("nightly retraining: %s", report.reason)
    summary = new_generation(home=home, params_path=params_path, overrides=list(overrides or []), spec=spec)
    return {"skipped": False, "reason": report.reason, **summary}
