"""The workspace folder (flows/runtime/workspace.py): `demo --reset` wipes only bctflow's own files, and never the
files a
lineage database outside the workspace still records."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bctflow.cli import app
from components.errors import ConfigError
from flows.params import load_params
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from registry.records import GenerationBundle
from tests.helpers import generation_record, write_params


def _workspace(tmp_path: Path, lineage_url: str | None) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    params = tmp_path / "params.yaml"
    write_params(params, [f"lineage.db_url={lineage_url}"] if lineage_url else [])
    home = tmp_path / "ws"
    ckpt = home / "generations" / "gen_000" / "model.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"weights")
    return home, params


def test_reset_refuses_to_orphan_an_external_lineage(tmp_path: Path, pg_cluster):
    url = pg_cluster.new_database()
    home, params = _workspace(tmp_path, url)
    store = LineageDB(url)
    store.commit_generation(GenerationBundle(generation_record(0, checkpoint_path=str(home / "generations"))))
    store.close()
    res = CliRunner().invoke(app, ["demo", "--reset", "--home", str(home), "--params", str(params)])
    assert res.exit_code != 0
    assert "records 1 generation(s)" in res.output and "would orphan them" in " ".join(res.output.split())
    assert (home / "generations" / "gen_000" / "model.pt").read_bytes() == b"weights"  # nothing deleted


def test_reset_wipes_a_workspace_whose_lineage_is_empty_or_its_own(tmp_path: Path, pg_cluster):
    for url in (pg_cluster.new_database(), None):  # an external database with no rows; the workspace's own SQLite
        home, params = _workspace(tmp_path / ("pg" if url else "own"), url)
        Workspace(home).reset(load_params(params))
        assert not home.exists()


def test_reset_refuses_a_folder_that_is_not_a_workspace(tmp_path: Path):
    home, params = _workspace(tmp_path, None)
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(ConfigError, match="holds files that are not bctflow's"):
        Workspace(home).reset(load_params(params))
    assert (home / "thesis.tex").exists()
    assert yaml.safe_load(params.read_text())["lineage"]["db_url"] is None
