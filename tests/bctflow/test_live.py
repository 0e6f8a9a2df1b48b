"""The commands that move what serves (bctflow/live.py): `bctflow rollback` answers a refusal in one line, exit 2,
with nothing written (the rollbacks themselves: tests/flows/backfill/test_rollback.py)."""

from __future__ import annotations

from typer.testing import CliRunner

from bctflow.cli import app
from tests.helpers import write_params


def test_rollback_without_a_live_gallery_is_one_line_and_exit_2(tmp_path):
    params = tmp_path / "params.yaml"
    write_params(params)
    home = tmp_path / "ws"
    res = CliRunner().invoke(app, ["rollback", "--home", str(home), "--params", str(params), "--to", "0"])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line and not line.startswith("params: ")]
    assert lines == ["error: there is no live gallery to roll back; create generation 0 first (bctflow run)"], lines
