"""Fixtures for the step tests: tiny params and a workspace whose generation 0 came from the real flow."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import copy_workspace


@pytest.fixture
def g0_workspace(g0_template: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(home, params file) of a fresh workspace holding generation 0 (digits classes 0–4): a copy of the one the real
    flow made for this test process (``g0_template``)."""
    return copy_workspace(g0_template, tmp_path)
