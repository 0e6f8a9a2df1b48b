"""The nightly deployment acts (flows/lifecycle/nightly.py, night.py): `prefect deploy` of the generated prefect.yaml on
a real Prefect server, a `prefect worker` process running the triggered nights. Each night's action is executed and
recorded in the lineage; a rerun of a finished night changes nothing; a night killed (SIGKILL) in the middle of its
action — a full backfill, between its publication and its commit — is run again and ends in the lineage an
uninterrupted night gives (a twin workspace that ran the same nights in this process)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flows.params import load_params
from flows.pipeline.deployment import prefect_yaml
from registry.lineage import LineageDB
from tests.conftest import REPO
from tests.helpers import write_params

BIN = Path(sys.executable).parent
#: every night retrains (the seed changes: a model-shaping parameter) and the policy re-embeds with it
NIGHTS = [("night-00", 0), ("night-01", 1), ("night-02", 2), ("night-03", 3)]
POLICY = ["lifecycle.policy=always", "backfill.chunk_size=64"]


def _wait(client: Any, run_id: Any, timeout: float = 420.0) -> Any:
    t0 = time.time()
    while time.time() - t0 < timeout:
        state = client.read_flow_run(run_id).state
        if state is not None and state.is_final():
            return state
        time.sleep(1.0)
    raise AssertionError(f"flow run {run_id} did not finish in {timeout:.0f} s")


def _facts(home: Path) -> dict[str, Any]:
    """The lineage as a night's outcome: generations (id, parent, status, production), backfill events (kind,
    target, items), the live pointer's generation, every night (key, action, target, state, items) — no times, no
    paths."""
    with LineageDB(f"sqlite:///{home / 'lineage.db'}", readonly=True, root=home) as store:
        doc = store.to_json()
        nights = [(n.night, n.action, n.target_generation_id, n.state, n.items, n.generation_id)
                  for n in store.nights.all()]  # fmt: skip
        events = [(b.kind, b.to_generation_id, b.reembedded) for b in store.backfills()]
        ptr = store.live_pointer()
    gens = [(g["id"], g["parent"], g["status"], g["production"]) for g in doc]
    return {"generations": gens, "backfills": events, "live": ptr.generation_id, "nights": nights}


@pytest.fixture(scope="module")
def deployed(prefect_harness, tmp_path_factory) -> dict[str, Any]:
    """The nightly deployment on the harness's server and a worker process on the pool, for the module."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL

    root = tmp_path_factory.mktemp("nightly-deploy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_API_URL=PREFECT_API_URL.value(), PREFECT_HOME=str(root / "prefect-home"))
    generated = root / "prefect.yaml"
    generated.write_text(prefect_yaml(load_params(REPO / "params.yaml")))
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="bctflow", type="process"), overwrite=True)
    res = subprocess.run([str(BIN / "prefect"), "--no-prompt", "deploy", "--all", "--prefect-file", str(generated)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=180)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    log = (root / "worker.log").open("w")
    worker = subprocess.Popen([str(BIN / "prefect"), "worker", "start", "--pool", "bctflow", "--limit", "1"],
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        with get_client(sync_client=True) as client:
            yield {"client": client, "dep": client.read_deployment_by_name("nightly-retrain/nightly"), "root": root}
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:  # under load its heartbeat can wait on Prefect's locked SQLite: kill it
            worker.kill()
            worker.wait(timeout=30)
        log.close()


def _night(deployed: dict[str, Any], home: Path, params: Path, key: str, seed: int,
           env: dict[str, str] | None = None) -> Any:  # fmt: skip
    client = deployed["client"]
    parameters = {"home": str(home), "params_path": str(params), "overrides": [f"train.seed={seed}"], "night": key}
    run = client.create_flow_run_from_deployment(deployed["dep"].id, parameters=parameters,
                                                 job_variables={"env": env or {}})  # fmt: skip
    return _wait(client, run.id)


@pytest.mark.timeout(1800)  # eight tiny nights (four by the worker, four in the twin) and a killed one
def test_three_nights_act_a_rerun_changes_nothing_and_a_killed_action_resumes(deployed, tmp_path: Path):
    from flows.lifecycle.nightly import nightly_generation

    params = tmp_path / "params.yaml"
    write_params(params, POLICY)
    home, twin = tmp_path / "ws", tmp_path / "twin"
    for key, seed in NIGHTS[:3]:
        assert _night(deployed, home, params, key, seed).is_completed(), key
    facts = _facts(home)
    assert [n[:4] for n in facts["nights"]] == [("night-01", "full", 1, "done"), ("night-02", "full", 2, "done")]
    assert [b[:2] for b in facts["backfills"]] == [("full", 1), ("full", 2)] and facts["live"] == 2
    assert all(n[4] > 0 for n in facts["nights"])  # what each action re-embedded is recorded

    assert _night(deployed, home, params, "night-02", 2).is_completed()  # the same night again
    assert _facts(home) == facts

    killed = _night(deployed, home, params, *NIGHTS[3], env={"BCTFLOW_KILL_AT": "backfill.before_sql"})
    assert not killed.is_completed()  # SIGKILL in the middle of the night's full backfill
    with LineageDB(f"sqlite:///{home / 'lineage.db'}", readonly=True, root=home) as store:
        assert store.nights.night("night-03").state == "acting"
    assert _night(deployed, home, params, *NIGHTS[3]).is_completed()  # the same night, run again

    for key, seed in NIGHTS:  # the twin: the same nights in this process, uninterrupted
        nightly_generation(home=str(twin), params_path=str(params), overrides=[f"train.seed={seed}"], night=key)
    assert _facts(home) == _facts(twin)
    assert _facts(home)["nights"][-1][:4] == ("night-03", "full", 3, "done")
