"""Workspace and benchmark commands (bctflow/operations.py): their own options refused in one line, exit 2."""

from __future__ import annotations

from typer.testing import CliRunner

from bctflow.cli import app


def test_a_workers_sweep_that_is_not_a_list_of_worker_counts_is_one_line(tmp_path):
    for bad in ("1,two", "0,2", ""):
        res = CliRunner().invoke(
            app, ["bench", "scale", "--items", "100", "--out", str(tmp_path / "r"), "--workers-sweep", bad]
        )
        assert res.exit_code == 2, res.output
        assert res.output.strip() == (
            f"error: --workers-sweep {bad!r} is not a list of worker counts; write e.g. --workers-sweep 1,2"
        )
        assert not (tmp_path / "r").exists()  # nothing measured, nothing written
