"""Validate a run before anything starts: params, dataset, alignment, lineage, checkpoints.

Runs in the calling process (no Prefect server needed) and writes nothing:
when the workspace has no lineage database yet, an in-memory empty lineage
stands in for it.
"""

from __future__ import annotations

from pathlib import Path

from flows.params import GenerationSpec, Params, load_params_with
from flows.plan import GenerationPlan, make_plan
from flows.workspace import Workspace
from registry.lineage import LineageStore

__all__ = ["open_store_readonly", "preflight"]


def open_store_readonly(params: Params, ws: Workspace) -> LineageStore:
    """The workspace's lineage store, or an empty in-memory one if it does not exist yet."""
    url = ws.lineage_url(params)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return LineageStore("sqlite://")
    return LineageStore(url)


def preflight(params_path: str | Path, overrides: list[str], home: Path, spec: dict | None) -> GenerationPlan:
    """Return the plan the flow would make, or raise the error it would raise."""
    params = load_params_with(params_path, overrides)
    ws = Workspace(home)
    store = open_store_readonly(params, ws)
    try:
        return make_plan(params, ws, store, GenerationSpec(**spec) if spec else None)
    finally:
        store.close()
