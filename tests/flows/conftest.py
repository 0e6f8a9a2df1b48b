"""Fixtures for the step tests: tiny params and a workspace whose generation 0 came from the real flow."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_generation, write_params


@pytest.fixture
def g0_workspace(prefect_harness, tmp_path: Path) -> tuple[Path, Path]:
    """(home, params file) of a fresh workspace holding generation 0 (digits classes 0–4), made by the real flow."""
    params = tmp_path / "params.yaml"
    write_params(params)
    home = tmp_path / "ws"
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    return home, params
