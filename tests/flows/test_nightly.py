"""The nightly deployment definition, and the flow both ways (changed / unchanged)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import yaml
from prefect import Flow
from prefect.client.schemas.schedules import CronSchedule
from prefect.schedules import Cron

from flows.params import load_params
from tests.conftest import REPO


def test_prefect_yaml_deploys_the_nightly_flow_on_the_params_schedule():
    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    (dep,) = doc["deployments"]
    path, fn = dep["entrypoint"].split(":")
    assert (REPO / path).exists()
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), fn)
    assert isinstance(flow, Flow) and flow.name == "nightly-retrain"
    assert set(dep["parameters"]) <= set(inspect.signature(flow.fn).parameters)
    (sched,) = dep["schedules"]
    params = load_params(REPO / "params.yaml")
    assert (sched["cron"], sched["timezone"]) == (params.schedule.cron, params.schedule.timezone)
    CronSchedule(cron=sched["cron"], timezone=sched["timezone"])  # valid cron and timezone
    deployment = flow.to_deployment(
        name=dep["name"], schedule=Cron(sched["cron"], timezone=sched["timezone"]), parameters=dep["parameters"]
    )
    assert deployment.schedules[0].schedule.cron == "0 2 * * *" and deployment.schedules[0].schedule.timezone == "UTC"


def test_nightly_flow_trains_only_when_something_changed(prefect_harness, tiny_params_file: Path, tmp_path: Path):
    from flows.nightly import nightly_generation
    from registry.lineage import LineageStore

    home = str(tmp_path / "ws")
    first = nightly_generation(home=home, params_path=str(tiny_params_file))
    assert first["skipped"] is False and first["generation"] == 0 and "empty" in first["reason"]
    second = nightly_generation(home=home, params_path=str(tiny_params_file))
    assert second == {"skipped": True, "reason": second["reason"], "last_generation": 0}
    assert second["reason"].startswith("no change since generation 0")
    third = nightly_generation(home=home, params_path=str(tiny_params_file), overrides=["train.lr=0.05"])
    assert third["skipped"] is False and third["generation"] == 1 and "parameters changed" in third["reason"]
    assert [g["id"] for g in LineageStore(f"sqlite:///{tmp_path / 'ws' / 'lineage.db'}").to_json()] == [0, 1]
