"""The nightly deployment (flows/pipeline/deployment.py): prefect.yaml is generated from params.yaml `schedule:` (the
committed
one is what the generator writes), a bad schedule is refused, and `prefect deploy` of the generated file gives a
deployment that queues an overlapping run instead of starting it (a real Prefect API)."""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prefect import Flow
from typer.testing import CliRunner

from components.errors import ConfigError
from flows.params import ScheduleParams, apply_overrides, load_params
from flows.pipeline.deployment import check_schedule, prefect_yaml
from tests.conftest import REPO


def test_the_committed_prefect_yaml_is_what_the_generator_writes_from_params_yaml():
    committed = (REPO / "prefect.yaml").read_text()
    assert committed == prefect_yaml(load_params(REPO / "params.yaml")), (
        "prefect.yaml is out of date: run `bctflow schedule --write-prefect-yaml` from the repository root"
    )
    assert committed.startswith("# GENERATED from params.yaml")
    (dep,) = yaml.safe_load(committed)["deployments"]
    path, fn = dep["entrypoint"].split(":")
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), fn)
    assert isinstance(flow, Flow) and flow.name == "nightly-retrain"
    assert set(dep["parameters"]) <= set(inspect.signature(flow.fn).parameters)
    assert dep["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}


def test_schedule_write_prefect_yaml_follows_params_yaml(tmp_path: Path, monkeypatch):
    from bctflow.cli import app

    params = load_params(REPO / "params.yaml")
    moved = apply_overrides(params, ["schedule.cron=30 4 * * 1-5", "schedule.timezone=Europe/Berlin"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(moved.as_dict(), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["schedule", "--write-prefect-yaml"])
    assert res.exit_code == 0, res.output
    written = (tmp_path / "prefect.yaml").read_text()
    assert written == prefect_yaml(moved)
    (sched,) = yaml.safe_load(written)["deployments"][0]["schedules"]
    assert (sched["cron"], sched["timezone"]) == ("30 4 * * 1-5", "Europe/Berlin")


def test_schedule_serve_deploys_the_same_limit():
    """`bctflow schedule --serve` hands serve_limit() to Flow.serve(global_limit=...), which makes this deployment."""
    from flows.lifecycle.nightly import nightly_generation
    from flows.pipeline.deployment import DEPLOYMENT, serve_limit

    deployment = nightly_generation.to_deployment(name=DEPLOYMENT, concurrency_limit=serve_limit())
    assert deployment.concurrency_limit == 1
    assert deployment.concurrency_options.collision_strategy.value == "ENQUEUE"


@pytest.mark.parametrize(
    ("cron", "timezone", "why"),
    [("0 2 * *", "UTC", 'Invalid cron string: "0 2 \\* \\*"'), ("0 2 * * *", "Mars/Base", "Invalid timezone")],
)
def test_a_schedule_prefect_would_refuse_is_one_error(cron: str, timezone: str, why: str):
    with pytest.raises(ConfigError, match=rf"params.yaml schedule: cron .* is not a schedule Prefect accepts \({why}"):
        check_schedule(ScheduleParams(cron=cron, timezone=timezone))


def test_the_deployed_nightly_flow_queues_an_overlapping_run(prefect_harness, tmp_path: Path):
    """`prefect deploy --all` of the generated prefect.yaml, against a real Prefect API: limit 1, ENQUEUE; a second
    run proposed while the first runs is told to wait (AwaitingConcurrencySlot) and may start once it finished."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL
    from prefect.states import Completed, Pending, Running

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_API_URL=PREFECT_API_URL.value(), PREFECT_HOME=str(tmp_path / "prefect-home"))
    generated = tmp_path / "prefect.yaml"
    generated.write_text(prefect_yaml(load_params(REPO / "params.yaml")))
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="bctflow", type="process"), overwrite=True)
        cli = Path(sys.executable).parent / "prefect"
        res = subprocess.run(
            [str(cli), "--no-prompt", "deploy", "--all", "--prefect-file", str(generated)],
            cwd=REPO,  # the entrypoint is relative to the repository root, as in the README
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        dep = client.read_deployment_by_name("nightly-retrain/nightly")
        assert dep.global_concurrency_limit is not None and dep.global_concurrency_limit.limit == 1
        assert dep.concurrency_options is not None and dep.concurrency_options.collision_strategy.value == "ENQUEUE"
        assert dep.schedules[0].schedule.cron == "0 2 * * *" and dep.work_pool_name == "bctflow"

        first, second = (client.create_flow_run_from_deployment(dep.id) for _ in range(2))
        assert client.set_flow_run_state(first.id, Pending()).state.is_pending()  # what a worker proposes
        client.set_flow_run_state(first.id, Running())
        waiting = client.set_flow_run_state(second.id, Pending()).state
        assert waiting.is_scheduled() and waiting.name == "AwaitingConcurrencySlot"  # queued, not failed
        client.set_flow_run_state(first.id, Completed())
        assert client.set_flow_run_state(second.id, Pending()).state.is_pending()  # its turn now
