"""A workspace copied with `cp -a` is self-contained: a generation and a backfill run in the copy while the original
is out of reach (moved away, so any read or write of it fails), and the original is byte-for-byte unchanged."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import mlflow

from components.indexing.live import LivePointer
from flows.params import load_params
from flows.recovery.reconcile import inspect_workspace
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from tests.helpers import run_backfill, run_generation, write_params


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root``: (mtime in ns, sha256) by relative path."""
    return {
        p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _paths_of(doc: list[dict]) -> list[str]:
    return [g[k] for g in doc for k in ("checkpoint", "index")]


def test_a_copied_workspace_runs_without_touching_the_original(prefect_harness, tmp_path: Path):
    params_file = tmp_path / "params.yaml"
    write_params(params_file)
    original, copy, away = tmp_path / "ws", tmp_path / "copy", tmp_path / "away"
    run_generation(original, params_file, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    before = _tree(original)
    original.rename(away)  # out of reach while the copy runs
    try:
        run_generation(copy, params_file, {"name": "g1", "classes": "all", "alignment": "hbct"})
        run_backfill(copy, params_file, target=1)
    finally:
        away.rename(original)
    assert _tree(original) == before  # not one byte or timestamp of the original changed

    params = load_params(params_file)
    doc = LineageDB(f"sqlite:///{copy / 'lineage.db'}", readonly=True).to_json()
    assert [g["name"] for g in doc] == ["g0", "g1"]
    assert all(Path(p).is_relative_to(copy.resolve()) and Path(p).exists() for p in _paths_of(doc))
    assert Path(LivePointer(copy / "live").pointer()["index"]).is_relative_to(copy.resolve())
    assert doc[1]["live"] and doc[1]["backfills"]  # the backfill switched the copy's live gallery to g1
    uri = f"sqlite:///{copy / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri, uri)
    for v in client.search_model_versions(f"name='{params.tracking.registered_model}'"):
        assert client.get_run(v.run_id).info.artifact_uri.startswith((copy / "mlartifacts").resolve().as_uri())
    assert inspect_workspace(Workspace(copy), params) == []
    assert inspect_workspace(Workspace(original), params) == []  # and the original is still whole
    orig_doc = LineageDB(f"sqlite:///{original / 'lineage.db'}", readonly=True).to_json()
    assert [g["name"] for g in orig_doc] == ["g0"] and orig_doc[0]["live"]
    shutil.rmtree(copy)
