"""Shared test setup: no telemetry, tiny-but-real settings, one Prefect test harness per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

REPO = Path(__file__).resolve().parents[1]

#: Small, fast, real settings: a narrow ResNet-18 on digits for one epoch.
TINY_OVERRIDES = [
    "data.dataset=digits",
    "model.backbone_kwargs={channels: [8, 8, 16, 16]}",
    "model.embed_dim=16",
    "train.epochs=1",
    "train.batch_size=128",
]


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect API for every flow test (starting it costs ~15 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def tiny_params_file(tmp_path: Path) -> Path:
    """A params.yaml with the repository's defaults and the tiny overrides applied."""
    import yaml

    from flows.params import apply_overrides, load_params

    p = apply_overrides(load_params(REPO / "params.yaml"), TINY_OVERRIDES)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p.as_dict(), sort_keys=False))
    return path
