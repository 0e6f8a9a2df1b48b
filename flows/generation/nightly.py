"""The ``nightly-retrain`` flow: retrain only when data, parameters or code changed since the last generation.

Deployed by ``prefect.yaml`` (generated from params.yaml ``schedule:`` by ``bctflow schedule --write-prefect-yaml``;
:mod:`flows.pipeline.deployment`) or served by ``bctflow schedule --serve``; at most one run at a time, later ones queue
(docs/design.md §7.14). It parses params once, and hands the digests and dataset fingerprint its change check
computed to the plan of the generation it starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.generation.changes import ChangeReport, detect_changes
from flows.generation.flow import new_generation
from flows.params import GenerationSpec, Params, load_params
from flows.planning import make_plan
from flows.recovery.reconcile import finish_interrupted
from flows.runtime.workspace import Workspace


@task(name="detect-changes", cache_policy=NO_CACHE)
def detect_task(params: Params, home: str) -> ChangeReport:
    ws = Workspace(Path(home))
    with ws.lineage(params, readonly=True) as store:
        return detect_changes(params, ws, store)


@flow(name="nightly-retrain", log_prints=True)
def nightly_generation(
    home: str = ".bctflow",
    params_path: str = "params.yaml",
    overrides: list[str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Create a new generation if data, parameters or code changed since the newest one; otherwise exit early."""
    params = load_params(params_path, overrides)
    report = detect_task(params, home)
    log = get_run_logger()
    if not report.changed:
        log.info("nightly retraining skipped: %s", report.reason)
        return {"skipped": True, "reason": report.reason, "last_generation": report.last_generation}
    log.info("nightly retraining: %s", report.reason)
    for f in finish_interrupted(params, Path(home)):
        log.info("finished an interrupted commit: %s", f.what)
    plan = make_plan(
        params,
        home,
        GenerationSpec(**spec) if spec else None,
        digest=report.params_digest,
        data_fingerprint=report.data_fingerprint,
        code=report.code_digest,
    )
    summary = new_generation(plan)
    return {"skipped": False, "reason": report.reason, **summary}
