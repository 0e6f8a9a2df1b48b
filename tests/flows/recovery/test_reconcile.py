"""Rolling forward and `bctflow doctor` (flows/recovery/reconcile.py): a committed generation's MLflow run that a kill
left RUNNING (or a stop left KILLED) is ended FINISHED by the next command; `doctor` without `--repair` writes
nothing — not the artifact URIs of a copied workspace's MLflow store, which it reports instead (`--repair` rewrites
them), nor a missing MLflow store file, which it reports; live vectors whose rows per generation differ from what the
lineage's pointer row recorded are reported with their fix."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bctflow.cli import app
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.params import load_params
from flows.recovery.reconcile import finish_interrupted, inspect_workspace
from flows.runtime.workspace import Workspace
from tests.helpers import first_generation


@pytest.fixture(scope="module")
def g0(prefect_harness, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file) of a workspace holding generation 0, made by the real flow; tests work on copies."""
    return first_generation(tmp_path_factory.mktemp("reconcile"))


def _copy(g0: tuple[Path, Path], tmp_path: Path) -> Path:
    """The workspace copied as a user would (``cp -a``): its MLflow store still names the original's artifacts."""
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(g0[0]), str(copy)], check=True)
    return copy


def _tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("status", ["RUNNING", "KILLED"])
def test_roll_forward_ends_the_mlflow_run_of_a_committed_generation(g0, tmp_path, status):
    """RUNNING: a kill -9 after the commit (the run never ended); KILLED: a Ctrl-C right after it."""
    params, ws = load_params(g0[1]), Workspace(_copy(g0, tmp_path))
    with ws.lineage(params, readonly=True) as store:
        run_id = store.generation(0).mlflow_run_id
    client = ws.tracking(params).client()
    client.update_run(run_id, status)
    what = f"generation 0's MLflow run {run_id} is {status}, not FINISHED, after its commit"
    assert [f.what for f in inspect_workspace(ws, params)] == [what]
    done = finish_interrupted(params, ws.home)  # what every command does before it plans
    assert [(f.what, f.repaired) for f in done] == [(what, True)]
    assert client.get_run(run_id).info.status == "FINISHED" and inspect_workspace(ws, params) == []


def test_doctor_without_repair_writes_nothing_in_a_copied_workspace(g0, tmp_path):
    copy, params_file = _copy(g0, tmp_path), g0[1]
    before = _tree(copy)
    found = CliRunner().invoke(app, ["doctor", "--home", str(copy), "--params", str(params_file)])
    assert _tree(copy) == before  # not one byte written: the MLflow store still names the original's artifacts
    assert found.exit_code == 1, found.output
    moved = f"the MLflow store's artifact URIs point under {(g0[0] / 'mlartifacts').resolve().as_uri()}"
    assert moved in " ".join(found.output.split()) and "not repaired" in found.output
    repaired = CliRunner().invoke(app, ["doctor", "--repair", "--home", str(copy), "--params", str(params_file)])
    assert repaired.exit_code == 0 and "repaired" in repaired.output, repaired.output
    clean = CliRunner().invoke(app, ["doctor", "--home", str(copy), "--params", str(params_file)])
    assert clean.exit_code == 0 and "workspace consistent" in clean.output, clean.output


def test_doctor_without_repair_does_not_create_a_missing_mlflow_store(g0, tmp_path):
    copy, params_file = _copy(g0, tmp_path), g0[1]
    (copy / "mlflow.db").unlink()
    before = _tree(copy)
    found = CliRunner().invoke(app, ["doctor", "--home", str(copy), "--params", str(params_file)])
    assert _tree(copy) == before and not (copy / "mlflow.db").exists()
    assert found.exit_code == 1, found.output
    assert f"the MLflow tracking store {copy / 'mlflow.db'} does not exist" in " ".join(found.output.split())


def test_doctor_finds_live_vectors_that_are_not_what_their_manifest_says(g0, tmp_path):
    params, ws = load_params(g0[1]), Workspace(_copy(g0, tmp_path))
    part = sorted((ws.generation_dir(0) / "gallery" / "parts").glob("part-*.npz"))[0]
    part.write_bytes(part.read_bytes() + b"\0")  # the live gallery's stamped rows changed behind the lineage's back
    found = [f for f in inspect_workspace(ws, params) if "live gallery's vectors" in f.what]
    assert len(found) == 1 and not found[0].repaired
    assert f"gallery part {part} is not the file" in found[0].what


def test_the_live_pointer_records_its_vectors_and_doctor_finds_rows_the_lineage_did_not_record(g0, tmp_path):
    params, ws = load_params(g0[1]), Workspace(_copy(g0, tmp_path))
    with ws.lineage(params, readonly=True) as store:
        ptr = store.live_pointer()
    n = len(GalleryParts(GalleryVersion(ws.generation_dir(0)).evaluation_gallery()))
    assert (ptr.store, ptr.collection, ptr.rows_by_generation) == ("faiss", None, {"0": n})  # FAISS: no collection
    assert ptr.index_params["index_type"] == params.index.type
    with sqlite3.connect(ws.home / "lineage.db") as db:  # the lineage recorded other rows than the store holds
        db.execute("UPDATE gallery_pointers SET rows_by_generation = ?", (json.dumps({"0": n, "1": 7}),))
    found = [f for f in inspect_workspace(ws, params) if "rows per generation" in f.what]
    index = ws.generation_dir(0) / "index"
    assert [(f.what, f.repaired, f.fix) for f in found] == [
        (
            f"the live gallery (faiss index {index}) holds rows per generation {{0: {n}}}, the lineage recorded "
            f"{{0: {n}, 1: 7}}",
            False,
            "run `bctflow backfill --generation 0` to publish a complete version, or restore the store from a backup",
        )
    ]
