"""The ``nightly-retrain`` flow: retrain only when data, parameters or code changed since the last generation, then —
with params ``lifecycle.policy`` set — decide what serves and carry it out (the ``lifecycle-night`` subflow,
:mod:`flows.lifecycle.night`; docs/design.md §7.18).

Deployed by ``prefect.yaml`` (generated from params.yaml ``schedule:`` by ``bctflow schedule --write-prefect-yaml``;
:mod:`flows.pipeline.deployment`) or served by ``bctflow schedule --serve``; at most one run at a time, later ones queue
(docs/design.md §7.14). It parses params once, and hands the digests and dataset fingerprint its change check
computed to the plan of the generation it starts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.generation.changes import ChangeReport, detect_changes
from flows.generation.flow import new_generation
from flows.lifecycle.night import lifecycle_night
from flows.params import GenerationSpec, Params, load_params
from flows.planning import make_plan
from flows.recovery.reconcile import finish_interrupted
from flows.runtime.workspace import Workspace


@task(name="detect-changes", cache_policy=NO_CACHE)
def detect_task(params: Params, home: str) -> ChangeReport:
    ws = Workspace(Path(home))
    with ws.lineage(params, readonly=True) as store:
        return detect_changes(params, ws, store)


def _night_key(night: str | None) -> str:
    """The night's name: the one given, else the flow run's scheduled date (UTC) — a rerun of the same scheduled
    night finds its row (docs/design.md §7.18)."""
    if night:
        return night
    from prefect.runtime import flow_run

    when = flow_run.scheduled_start_time
    return (when or datetime.now(UTC)).astimezone(UTC).date().isoformat()


def _undecided(params: Params, home: str, newest: int | None) -> int | None:
    """The newest generation when no night decided on it yet (a night killed after its generation committed and
    before its decision: the rerun trains nothing and decides on it), else None."""
    if not newest:
        return None
    ws = Workspace(Path(home))
    with ws.lineage(params, readonly=True) as store:
        return None if any(n.generation_id == newest for n in store.nights.all()) else newest


@flow(name="nightly-retrain", log_prints=True)
def nightly_generation(
    home: str = ".bctflow",
    params_path: str = "params.yaml",
    overrides: list[str] | None = None,
    spec: dict[str, Any] | None = None,
    night: str | None = None,
) -> dict[str, Any]:
    """Create a new generation if data, parameters or code changed since the newest one; otherwise skip training.
    With params ``lifecycle.policy`` set, then decide and act on night ``night`` (default: the run's scheduled
    date) — also on a night that trained nothing (a re-embedding carried over continues)."""
    params = load_params(params_path, overrides)
    report = detect_task(params, home)
    log = get_run_logger()
    out: dict[str, Any]
    if not report.changed:
        log.info("nightly retraining skipped: %s", report.reason)
        out = {"skipped": True, "reason": report.reason, "last_generation": report.last_generation}
    else:
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
        out = {"skipped": False, "reason": report.reason, **new_generation(plan)}
    if params.lifecycle.policy is None or (report.last_generation is None and out["skipped"]):
        return out
    new = _undecided(params, home, report.last_generation) if out["skipped"] else int(out["generation"])
    if new == 0:  # generation 0 makes the live gallery: nothing to decide yet
        return out
    return out | {"night": lifecycle_night(params, home, _night_key(night), new)}
