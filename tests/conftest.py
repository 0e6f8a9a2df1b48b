"""Shared test setup: no telemetry, tiny-but-real settings, one Prefect test harness per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# one OpenMP/torch thread in every test process and each child it starts: two xdist workers on a 2-core machine,
# each with a thread per core, spent their CPU waiting on each other (a 40-test slice of flow tests: 141 s with the
# default threads, 119 s with one). Tests that need threads set them (benchmarks' workers, the cluster's).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# the byte-code each process compiles is cached for the next (the suite starts hundreds of Python processes: CLI
# commands, DVC stages, Dask workers, the service); under PYTHONDONTWRITEBYTECODE each compiled torch, MLflow and
# Prefect again (`import mlflow, torch, prefect`: 9.8 s from source, 4.0 s from cached byte-code)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from flows.runtime.env import quiet_environment

sys.dont_write_bytecode = False
quiet_environment()

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


@pytest.fixture(scope="session")
def g0_template(prefect_harness, tmp_path_factory) -> Path:
    """A folder holding the tiny ``params.yaml`` and a workspace ``ws`` with generation 0 (digits classes 0–4), made
    by the real flow once per test process; tests take copies (:func:`tests.helpers.copy_workspace`) — each module
    and test that trained its own took 13–16 s of a CI worker."""
    from tests.helpers import first_generation

    root = tmp_path_factory.mktemp("g0-template")
    first_generation(root)
    return root


@pytest.fixture
def tiny_params_file(tmp_path: Path) -> Path:
    """A params.yaml with the repository's defaults and the tiny overrides applied."""
    from tests.helpers import write_params

    path = tmp_path / "params.yaml"
    write_params(path)
    return path


@pytest.fixture(scope="session")
def pg_cluster():
    """A real PostgreSQL 15 cluster for the whole session (the Debian package's initdb + pg_ctl)."""
    from tests.pg import BIN, PostgresCluster, available

    if not available():
        why = f"PostgreSQL server binaries not found in {BIN} (apt install postgresql, or set BCTFLOW_PG_BIN)"
        if os.environ.get("BCTFLOW_REQUIRE_PG") == "1":  # .ci/run: the PostgreSQL tests must run, not skip
            pytest.fail(why)
        pytest.skip(why)
    cluster = PostgresCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """A fresh, empty lineage database URL: a SQLite file, and a database on the real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'lineage.db'}"
    return request.getfixturevalue("pg_cluster").new_database()


#: the test files that take longest (worker seconds in CI, 2026-11-29), longest first. `--dist loadfile` keeps a file
#: on one worker and, with `--no-loadscope-reorder` (pyproject.toml), hands files out in collection order as workers
#: free up (xdist's default hands out the files with the most tests first, which started these few-test files last);
#: handed out first (longest-processing-time first), the rest fill the other worker around them.
LONGEST_FIRST = (
    "tests/bctflow/test_demo.py",  # the whole demo, when BCTFLOW_RUN_DEMO=1 (3 min quiet, 8 in CI)
    "tests/flows/recovery/test_crash_consistency.py",
    "tests/flows/backfill/test_cluster.py",
    "tests/test_dvc_pipeline.py",
    "tests/flows/backfill/test_gallery_stores.py",
    "tests/flows/runtime/test_prefect_api.py",
    "tests/bctflow/test_interrupt.py",
    "tests/components/training/test_distributed.py",
    "tests/components/training/test_compile.py",
    "tests/flows/backfill/test_backfill_kill.py",
    "tests/flows/backfill/test_transform.py",
    "tests/flows/test_lifecycle_session.py",
    "tests/registry/tracking/test_registered_model.py",
    "tests/flows/generation/test_training_streamed.py",
    "tests/flows/backfill/test_reembedding.py",
    "tests/benchmarks/test_serve.py",  # bench serve's preparation, kept and reused (~60-80 s; added 2026-12-05)
    "tests/flows/serving/test_app.py",
    "tests/flows/generation/test_mlflow_story.py",
    "tests/flows/generation/test_distributed_generation.py",
    "tests/flows/test_postgres_backend.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of :data:`LONGEST_FIRST` first, in its order; every file's tests keep their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item: pytest.Item) -> int:
        return rank.get(item.path.relative_to(REPO).as_posix(), len(rank))

    items.sort(key=key)  # stable: the others keep their collection order
