"""A backfill on a Dask cluster (flows/backfill/cluster.py) with real processes on loopback: a ``dask scheduler`` and
two
``dask worker`` processes started here, the backfill pointed at the scheduler (``backfill.cluster: tcp://…``), each
run of chunks one Prefect task run; a worker killed mid-run has its run rescheduled and the gallery ends with one row
per item; a worker that cannot load the model fails the backfill with one line naming it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prefect.settings import PREFECT_API_URL

from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from flows.backfill.cluster import ClusterError, parts_per_run
from flows.params import load_params
from flows.runtime.workspace import Workspace
from tests.conftest import REPO
from tests.helpers import first_generation, run_backfill, run_generation

CHUNK = 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(what: str, ok, seconds: float = 120.0) -> None:
    end = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > end:
            raise TimeoutError(f"{what} did not come up in {seconds:.0f} s")
        time.sleep(0.2)


class Cluster:
    """A scheduler and worker processes on loopback (the CLIs a user runs: ``dask scheduler``, ``dask worker``)."""

    def __init__(self, tmp: Path) -> None:
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        self.tmp = tmp
        port = self.address.rsplit(":", 1)[1]
        self.scheduler = self._start("scheduler", ["--host", "127.0.0.1", "--port", port, "--no-dashboard"])
        self.workers: list[subprocess.Popen] = []

    def _start(self, kind: str, args: list[str]) -> subprocess.Popen:
        log = open(self.tmp / f"{kind}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 - closed with the process
        cmd = [sys.executable, "-m", "distributed.cli.dask_" + kind, *args]
        return subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def add_workers(self, n: int) -> None:
        from distributed import Client

        for _ in range(n):
            args = [self.address, "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1", "--no-dashboard"]
            self.workers.append(self._start("worker", args))
        with Client(self.address, timeout=60) as client:
            _wait_for("the workers", lambda: len(client.scheduler_info()["workers"]) >= len(self.alive()))

    def alive(self) -> list[subprocess.Popen]:
        return [w for w in self.workers if w.poll() is None]

    def stop(self) -> None:
        for p in [*self.workers, self.scheduler]:
            with_kill = p.poll() is None
            if with_kill:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """One scheduler for the module's tests (a scheduler and two workers started for each test, every process
    importing torch and the project, took ~50 s of one CI worker)."""
    c = Cluster(tmp_path_factory.mktemp("dask"))
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(module_cluster: Cluster) -> Cluster:
    """The module's scheduler with two live workers (a test that killed one gets it replaced)."""
    module_cluster.add_workers(2 - len(module_cluster.alive()))
    return module_cluster


@pytest.fixture(scope="module")
def workspace(prefect_harness, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file): g0 on digits 0–4, g1 on every class; chunks of 64 items."""
    home, params = first_generation(tmp_path_factory.mktemp("cluster"), [f"backfill.chunk_size={CHUNK}"])
    run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False})
    return home, params


def _live_rows(home: Path, params: Path) -> GalleryParts:
    with Workspace(home).lineage(load_params(params), readonly=True) as store:
        index = store.live_pointer().index_path
    return GalleryParts(GalleryVersion.of_index(index).evaluation_gallery())


def test_a_backfill_on_a_scheduler_and_two_worker_processes_writes_one_row_per_item_as_task_runs(workspace, cluster):
    home, params = workspace
    on = [f"backfill.cluster={cluster.address}", "backfill.chunks_per_task=1"]
    res = run_backfill(home, params, on, target=1, fraction=1.0)
    rows = _live_rows(home, params)
    ids = rows.column("ids")
    assert len(ids) == len(np.unique(ids)) == res["reembedded"]
    assert set(rows.column("stamps").tolist()) == {1}
    assert len(rows.part_paths()) == -(-len(ids) // CHUNK) == res["parts"]
    runs = _task_runs("embed-evaluation-parts-")
    assert len({r.name for r in runs if r.state_type.value == "COMPLETED"}) >= res["parts"]  # a task run per chunk


def _task_runs(prefix: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    with get_client(sync_client=True) as client:
        return client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_=prefix)))


def test_a_worker_killed_mid_backfill_has_its_chunks_rescheduled_and_the_gallery_ends_with_one_row_per_item(
    workspace, cluster, tmp_path
):
    home, params = workspace
    on = [f"backfill.cluster={cluster.address}", "backfill.chunks_per_task=1", "backfill.throttle_seconds=1.0"]
    work = Workspace(home).backfills_dir / "in_progress"

    def kill_one_after_the_first_part() -> None:
        _wait_for("a first part", lambda: any(work.glob("**/parts/part-*.npz")), 300)
        victim = cluster.alive()[0]
        os.killpg(victim.pid, signal.SIGKILL)

    import threading

    killer = threading.Thread(target=kill_one_after_the_first_part, daemon=True)
    killer.start()
    res = run_backfill(home, params, on, target=1, fraction=1.0)
    killer.join(timeout=1)
    assert len(cluster.alive()) == 1  # one worker was killed mid-run
    rows = _live_rows(home, params)
    ids = rows.column("ids")
    assert len(ids) == len(np.unique(ids)) == res["reembedded"]  # rows = items, duplicates = 0
    assert set(rows.column("stamps").tolist()) == {1}  # none unstamped


def test_a_worker_that_cannot_load_the_model_fails_the_backfill_in_one_line_naming_it(workspace, cluster):
    home, params = workspace
    from flows.backfill.make import plan_backfill

    on = [f"backfill.cluster={cluster.address}", "backfill.restart_zeta=false"]
    p = load_params(params, on)
    plan = plan_backfill(p, Workspace(home), target=1, fraction=1.0)
    before = _live_rows(home, params).digest()
    checkpoint = Path(plan.target_checkpoint)
    kept = checkpoint.read_bytes()
    from flows.backfill.flow import backfill
    from flows.backfill.forecast import forecast_backfill

    forecast = forecast_backfill(plan)  # the plan measured before the file is damaged (it loads the model here)
    checkpoint.write_bytes(kept[: len(kept) // 2])
    try:
        with pytest.raises(ClusterError) as err:
            backfill(plan, forecast)
    finally:
        checkpoint.write_bytes(kept)
        shutil.rmtree(Workspace(home).backfills_dir / "in_progress", ignore_errors=True)  # abandoned: the module's next
    msg = str(err.value)
    assert re.match(r"worker tcp://127\.0\.0\.1:\d+ could not embed parts \d+–\d+ of the evaluation gallery \(", msg)
    assert "CheckpointMismatchError" in msg
    assert (
        msg.endswith(
            "nothing was published and the live gallery is unchanged: fix it and run the same command "
            "(finished chunks are kept)"
        )
        and "\n" not in msg
    )
    assert _live_rows(home, params).digest() == before


def test_a_scheduler_that_does_not_answer_or_a_bad_address_is_one_line_at_plan_time(tmp_path):
    from components.errors import ConfigError
    from flows.backfill.task_runner import check_cluster
    from tests.helpers import write_params

    address = f"tcp://127.0.0.1:{_free_port()}"  # nothing listens there
    p = write_params(tmp_path / "params.yaml", [f"backfill.cluster={address}"])
    with pytest.raises(ConfigError) as err:
        check_cluster(p)
    assert str(err.value) == (
        f"the Dask scheduler at {address} (backfill.cluster) does not answer (Connection refused); start it (`dask "
        "scheduler`, then `dask worker <address>` on each machine) or set backfill.cluster: local"
    )
    with pytest.raises(ConfigError, match=r"backfill\.cluster: String should match pattern"):
        load_params(tmp_path / "params.yaml", ["backfill.cluster=my-cluster:8786"])


def test_a_command_killed_mid_backfill_on_a_cluster_resumes_keeping_every_finished_chunk(workspace, cluster):
    home, params = workspace
    cmd = [sys.executable, "-m", "bctflow.cli", "backfill", "--home", str(home), "--params", str(params)]
    cmd += ["--generation", "1", "--seed", "7", "--set", f"backfill.cluster={cluster.address}"]
    cmd += ["--set", "backfill.chunks_per_task=1"]
    # the session's Prefect server (outside the killed command's process group; two temporary servers, one a command,
    # took ~35 s of one CI worker — a temporary server killed with its command: tests/flows/runtime/test_prefect_api.py)
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    parts = Workspace(home).backfills_dir / "in_progress"
    log = cluster.tmp / "first.log"
    with open(log, "w") as out:  # slowed down (a run option) so that the kill lands between chunks
        slow = [*cmd, "--set", "backfill.throttle_seconds=1.0"]
        first = subprocess.Popen(slow, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for("two finished parts", lambda: len(list(parts.glob("**/parts/part-*.npz"))) >= 2 or first.poll(), 400)
        assert first.poll() is None, log.read_text()[-3000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    time.sleep(3)  # the workers finish the run each was writing (the scheduler lost its client)
    kept = len(list(parts.glob("**/parts/part-*.npz")))
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    line = next(x for x in again.stdout.splitlines() if x.startswith("backfill ") and " done:" in x)
    resumed = int(re.search(r"(\d+)/\d+ parts resumed", line).group(1))
    assert resumed >= kept >= 2  # every chunk finished before the rerun was kept, none embedded twice
    rows = _live_rows(home, params)
    ids = rows.column("ids")
    assert len(ids) == len(np.unique(ids)) and set(rows.column("stamps").tolist()) == {1}


def test_a_backfill_into_milvus_lite_on_the_cluster_prints_no_traceback_error_or_grpc_line(g0_workspace, cluster):
    """Milvus Lite's gRPC server runs inside the command (threads of its process). A backfill into it on
    the cluster printed that server's ``ERROR | grpc._server`` report of an RPC it does not implement (pymilvus's
    AllocTimestamp, asked after creating an index) with a traceback, gRPC's ``Got goaway … too_many_pings`` (pymilvus's
    keepalive pings) and its fork line — then ended with rc 0 and the right rows. The same backfill, as the CLI runs
    it in a user's shell (no GRPC_VERBOSITY): rc 0, one row per item in the Milvus collection, and the console holds
    no traceback, no ERROR and no gRPC line; what the server logs goes to the Milvus Lite file's log beside it."""
    from components.indexing.backend import collection_at

    home, params = g0_workspace
    cmd = [sys.executable, "-m", "bctflow.cli", "backfill", "--home", str(home), "--params", str(params)]
    cmd += ["--generation", "0", "--set", f"backfill.cluster={cluster.address}"]
    cmd += ["--set", "gallery.store=milvus", "--set", "gallery.uri=milvus.db", "--set", "gallery.name=c49"]
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "COLUMNS": "300"}
    env.pop("GRPC_VERBOSITY", None)  # a user's shell: the test process has bctflow's default (tests/conftest.py)
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    console = run.stdout + run.stderr
    assert run.returncode == 0, console[-3000:]
    assert "Traceback" not in console and "ERROR" not in console, console[-3000:]
    assert not [x for x in console.splitlines() if re.search("grpc|goaway", x, re.IGNORECASE)], console[-3000:]
    items = int(re.search(r"\((\d+) items re-embedded", console).group(1))
    with Workspace(home).lineage(load_params(params), readonly=True) as lineage:
        index = Path(lineage.live_pointer().index_path)
    vectors = collection_at(index)
    try:
        rows, audit = vectors.count_by_generation(), vectors.audit()
    finally:
        vectors.store.close()  # Milvus Lite: one process per file
    assert (
        vectors.store.name == "milvus"
        and rows == {0: items}
        and audit == {"rows": items, "duplicates": 0, "unstamped": 0}
    )
    assert "MilvusLite server started for" in (home / "milvus.db.log").read_text()  # the server's log, beside it
    for log in cluster.tmp.glob("worker-*.log"):  # the workers never touch the store: no gRPC there either
        assert not re.search("grpc|goaway", log.read_text(), re.IGNORECASE), log


def test_a_small_gallery_is_cut_into_about_four_task_runs_per_worker_and_a_large_one_into_chunks_per_task():
    assert parts_per_run(13, 2, 8) == 1  # 100k items of 8192: 13 runs, not 8 + 5 parts on two workers
    assert parts_per_run(40, 2, 8) == 5  # 8 runs
    assert parts_per_run(122_071, 16, 8) == 8  # 1B items: capped at chunks_per_task
    assert parts_per_run(3, 4, 8) == parts_per_run(5, 0, 8) == 1  # never below one part
