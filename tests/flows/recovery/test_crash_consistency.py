"""Crash consistency (docs/commit-protocol.md): a real `bctflow` child process SIGKILLs itself at each step boundary
of the generation commit and of the backfill (components/faults.py), the same command is run again, and the
workspace must then be consistent: lineage generations = MLflow versions, aliases = lineage, live/CURRENT loads and
matches the lineage's pointer, no orphan folder, nothing left in staging or backfills/in_progress, every committed
generation's MLflow run FINISHED."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from prefect.settings import PREFECT_API_URL
from typer.testing import CliRunner, Result

from bctflow.cli import app
from components.faults import KILL_ENV
from components.indexing.live import LivePointer
from components.indexing.stores.faiss import MANIFEST_FILE
from components.io import file_sha256
from flows.params import load_params
from flows.recovery.reconcile import inspect_workspace
from flows.runtime.workspace import Workspace
from tests.helpers import copy_workspace, run_generation, write_params

GENERATION_POINTS = [
    "generation.before_register",
    "generation.after_register",
    "commit.before_sql",
    "commit.after_sql",
    "commit.after_move",
    "commit.after_pointer",
]
BACKFILL_POINTS = ["backfill.before_sql", "backfill.after_sql", "commit.after_pointer"]


def _bctflow(args: list[str], home: Path, params: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}  # the test's Prefect server: no start-up
    env.pop(KILL_ENV, None)
    if kill_at:
        env[KILL_ENV] = kill_at
    cmd = [sys.executable, "-m", "bctflow.cli", *args, "--home", str(home), "--params", str(params)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _assert_consistent(home: Path, params: Path, generations: list[str]) -> None:
    p = load_params(params)
    ws = Workspace(home)
    assert inspect_workspace(ws, p) == []  # `bctflow doctor` finds nothing
    with ws.lineage(p, readonly=True) as store:
        gens = store.generations()
        assert [g.name for g in gens] == generations
        tracking = ws.tracking(p)
        tagged = tracking.generation_versions()
        assert sorted(v for v, _ in tagged) == sorted(g.mlflow_version for g in gens)  # one version per generation
        versions = {g.id: g.mlflow_version for g in gens}
        client = tracking.client()
        assert [client.get_run(g.mlflow_run_id).info.status for g in gens] == ["FINISHED"] * len(gens)  # none left
        assert tracking.alias_version("production") == versions[store.production_generation_id()]
        ptr = store.live_pointer()
        assert tracking.alias_version("gallery") == versions[ptr.generation_id]
        live = LivePointer(ws.live_dir)
        assert live.pointer()["generation"] == ptr.generation_id and live.index().ntotal > 0
        assert ptr.index_sha256 == file_sha256(Path(ptr.index_path) / MANIFEST_FILE)  # the serving index, pinned
        assert sorted(d.name for d in ws.generations_dir.iterdir()) == [f"gen_{g.id:03d}" for g in gens]
        assert not list(ws.staging_dir.glob("gen_*"))
        assert not (ws.backfills_dir / "in_progress").exists()


#: the two generations params.yaml lists (g0 on classes 0-4, g1 aligned to it on all)
G0 = {"name": "g0", "classes": [0, 1, 2, 3, 4]}
G1 = {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False}


@pytest.fixture(scope="module")
def chain_g0(tmp_path_factory, prefect_harness) -> Path:
    """A folder with params.yaml (the chain's two generations) and a workspace ``ws`` holding generation 0, made once
    by the real flow; each test works on a copy (:func:`~tests.helpers.copy_workspace`)."""
    root = tmp_path_factory.mktemp("crash-g0")
    params = root / "params.yaml"
    write_params(params, [f"generations={json.dumps([G0, G1])}"])  # JSON is YAML's flow style
    run_generation(root / "ws", params, G0)
    return root


@pytest.fixture(scope="module")
def chain_g1(chain_g0, tmp_path_factory) -> Path:
    """The same after generation 1 (aligned, not backfilled), made once by the real flow on a copy of g0's."""
    root = tmp_path_factory.mktemp("crash-g1")
    home, params = copy_workspace(chain_g0, root)
    run_generation(home, params, G1)
    return root


@pytest.fixture
def g0(chain_g0, tmp_path: Path) -> tuple[Path, Path]:
    return copy_workspace(chain_g0, tmp_path)


@pytest.fixture
def g1(chain_g1, tmp_path: Path) -> tuple[Path, Path]:
    return copy_workspace(chain_g1, tmp_path)


def test_a_generation_killed_after_an_epoch_and_at_each_commit_step_in_turn_is_finished_by_the_same_command(
    g0, monkeypatch
):
    """The same command killed right after epoch 1 of 2 was checkpointed, then at every step boundary of the
    generation commit in turn — each run resumes what the previous kill left and is killed at the next boundary (a
    resumed run passes through the same steps) — and then run to the end. (One kill per fresh copy, two commands a
    boundary, took ~650 s of one CI worker; the epoch kill in a test of its own, another ~60 s.)

    The run after the epoch kill resumes from that epoch in the same MLflow run and says so before it trains; the runs
    after it say that training is finished. Between the registration and the SQL commit, `bctflow doctor` names what
    the kill left and exits 1, `--repair` deletes the version with no lineage row, a second `doctor` finds nothing, and
    the next run registers again."""
    home, params = g0
    monkeypatch.setenv("COLUMNS", "300")  # Prefect's console lines unwrapped
    args = ["run", "--generation", "g1", "--epochs", "2"]
    first = _bctflow(args, home, params, kill_at="train.after_epoch")
    assert first.returncode == -signal.SIGKILL, first.stdout[-2000:] + first.stderr[-2000:]
    (run_id,) = re.findall(r"MLflow run (\w+): ", first.stdout + first.stderr)
    assert "resuming" not in first.stdout + first.stderr
    for before, point in zip(["train.after_epoch", *GENERATION_POINTS], GENERATION_POINTS):
        killed = _bctflow(args, home, params, kill_at=point)
        out = killed.stdout + killed.stderr
        assert killed.returncode == -signal.SIGKILL, (point, out[-4000:])
        if before == "train.after_epoch":  # epoch 1 was not trained again
            assert f"resuming g1 from epoch 1 of 2 (MLflow run {run_id})\n" in out and out.count("resuming") == 1
            assert "[model] epoch 1/2" not in out and "[model] epoch 2/2" in out
        elif before.startswith("generation."):  # killed after training, before the commit: not trained again
            assert re.search(r"resuming g1 from epoch 2 of 2 \(MLflow run \w+\): it finished training", out), point
        if point == "generation.after_register":
            _doctor_repairs(home, params)
    again = _bctflow(args, home, params)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    _assert_consistent(home, params, ["g0", "g1"])


def _doctor_repairs(home: Path, params: Path) -> None:
    """`bctflow doctor` reports the registered version a kill left without its lineage row (exit 1), `--repair`
    deletes it, and a second `doctor` finds the workspace consistent. The real CLI in this process (three child
    processes, each importing torch, MLflow and the project, took ~25 s of one CI worker; the kills need children)."""

    def doctor(*flags: str) -> Result:
        return CliRunner().invoke(app, ["doctor", *flags, "--home", str(home), "--params", str(params)])

    found = doctor()
    assert found.exit_code == 1, found.output
    assert "not repaired" in found.output and "left" in found.output
    repaired = doctor("--repair")
    assert repaired.exit_code == 0 and "repaired" in repaired.output, repaired.output
    clean = doctor()
    assert clean.exit_code == 0 and "workspace consistent" in clean.output, clean.output


def test_a_backfill_killed_at_each_commit_step_in_turn_is_finished_by_the_same_command(g1):
    """The same backfill killed at each step boundary of its commit in turn, then run to the end: it finishes what
    the kills left, never runs twice, and once committed re-embeds nothing."""
    home, params = g1
    for point in BACKFILL_POINTS:
        killed = _bctflow(["backfill", "--generation", "1"], home, params, kill_at=point)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stdout[-2000:] + killed.stderr[-2000:])
    again = _bctflow(["backfill", "--generation", "1"], home, params)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    _assert_consistent(home, params, ["g0", "g1"])
    assert "is already done" in " ".join(again.stdout.split()), again.stdout[-3000:]  # committed before the last kill
    p = load_params(params)
    with Workspace(home).lineage(p, readonly=True) as store:
        assert store.live_pointer().generation_id == 1 and len(store.backfills()) == 1  # never run twice


def test_a_backfill_killed_before_its_commit_whose_seal_was_damaged_seals_the_version_anew_and_commits(g1):
    """Killed between its publish step and its lineage transaction, the published version's ``seal.json`` then
    damaged: the same command's publish step finds the seal unreadable (the switch would refuse it in one line),
    verifies the published version, seals it anew, and the switch commits with that seal pinned — a rollback to it
    checks it by the seal."""
    from components.indexing.seal import SEAL, read_seal, unsealed
    from components.indexing.version import GalleryVersion

    home, params = g1
    killed = _bctflow(["backfill", "--generation", "1"], home, params, kill_at="backfill.before_sql")
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-2000:]
    version = GalleryVersion(home / "live" / "index-v001")
    (version.root / SEAL).write_text("{}")
    again = _bctflow(["backfill", "--generation", "1"], home, params)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    _assert_consistent(home, params, ["g0", "g1"])
    with Workspace(home).lineage(load_params(params), readonly=True) as store:
        ptr = store.live_pointer()
    assert Path(ptr.index_path) == version.evaluation_index and len(store.backfills()) == 1
    assert ptr.seal_sha256 == read_seal(version)[1] and unsealed(version, ptr.seal_sha256) is None


def test_kills_at_random_instants_then_the_same_command_finishes(g0):
    """Kills at random moments (fixed seed), not only at the named boundaries: a generation and then a backfill are
    started until each was SIGKILLed after a random delay (an attempt that finishes first is simply a rerun; at most
    6 attempts each), and the same command then resumes from what the kill left: 2 kills (20, then 10, 6 and 4, as
    CI's time limit came near, then none; back since the suite caches its byte-code and takes ~11 minutes — the
    named boundaries are each killed above)."""
    home, params = g0
    rng = random.Random(20261123)
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    env.pop(KILL_ENV, None)
    kills = 0
    for args in (["run", "--generation", "g1"], ["backfill", "--generation", "1"]):
        cmd = [sys.executable, "-m", "bctflow.cli", *args, "--home", str(home), "--params", str(params)]
        killed = attempts = 0
        while killed < 1 and attempts < 6:
            attempts += 1
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                proc.wait(timeout=rng.uniform(1.5, 12.0))  # finished before its kill: the next attempt is a rerun
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed += 1
        kills += killed
        final = _bctflow(args, home, params)
        assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    assert kills == 2, f"only {kills} attempts were killed"
    _assert_consistent(home, params, ["g0", "g1"])
