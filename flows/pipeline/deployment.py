"""The nightly deployment, defined once (docs/design.md §7.14).

params.yaml ``schedule:`` is the schedule's one home. ``prefect.yaml`` — what ``prefect deploy`` reads, and it cannot
read another file — is generated from it by ``bctflow schedule --write-prefect-yaml`` (a test checks that the
committed file is what the generator writes from the committed params.yaml), and ``bctflow schedule --serve`` serves
the same definition. Both allow one nightly run at a time: a run that comes due while another runs waits in
Prefect's ``AwaitingConcurrencySlot`` state and starts when that one ends, instead of failing on the workspace lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from components.errors import ConfigError
from components.io import atomic_write_text
from flows.params import Params, ScheduleParams

__all__ = [
    "COLLISION_STRATEGY",
    "CONCURRENCY_LIMIT",
    "DEPLOYMENT",
    "ENTRYPOINT",
    "WORK_POOL",
    "check_schedule",
    "prefect_yaml",
    "serve_limit",
    "write_prefect_yaml",
]

DEPLOYMENT = "nightly"
ENTRYPOINT = "flows/lifecycle/nightly.py:nightly_generation"
WORK_POOL = "bctflow"
#: nightly runs at a time; a run beyond it waits for a slot (Prefect's ENQUEUE; CANCEL_NEW would drop it)
CONCURRENCY_LIMIT = 1
COLLISION_STRATEGY = "ENQUEUE"
DESCRIPTION = "Retrain a new generation when the data, the model-shaping parameters or code changed since the last one."

HEADER = """\
# GENERATED from params.yaml `schedule:` by `bctflow schedule --write-prefect-yaml`; do not edit — change params.yaml
# and run that command again (tests/flows/pipeline/test_deployment.py checks that this file is what it writes).
# Prefect deployment of bctflow's nightly retraining (docs/operations.md, "Nightly retraining", has the whole recipe):
#   export PREFECT_API_URL=http://127.0.0.1:4200/api   # the server `prefect server start` runs
#   prefect work-pool create bctflow --type process
#   prefect deploy --all                    # from the repository root
#   prefect worker start --pool bctflow     # from the repository root (flows run in the worker's directory)
# One nightly run at a time: a run due while one runs waits (AwaitingConcurrencySlot) and starts after it.
"""


def check_schedule(schedule: ScheduleParams) -> None:
    """ConfigError unless ``schedule:`` is a cron Prefect accepts, in an IANA timezone (Prefect's own check)."""
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=schedule.cron, timezone=schedule.timezone)
    except ValidationError as err:
        why = "; ".join(str(e.get("msg", "")).removeprefix("Value error, ") for e in err.errors())
        raise ConfigError(
            f"params.yaml schedule: cron {schedule.cron!r} in timezone {schedule.timezone!r} is not a schedule "
            f'Prefect accepts ({why}); write a five-field cron and an IANA timezone, e.g. cron: "0 2 * * *", '
            "timezone: UTC"
        ) from None


def _deployment(params: Params, home: str, params_path: str) -> dict[str, Any]:
    return {
        "name": DEPLOYMENT,
        "description": DESCRIPTION,
        "entrypoint": ENTRYPOINT,
        "parameters": {"home": home, "params_path": params_path},
        "schedules": [{"cron": _Quoted(params.schedule.cron), "timezone": params.schedule.timezone, "active": True}],
        "concurrency_limit": {"limit": CONCURRENCY_LIMIT, "collision_strategy": COLLISION_STRATEGY},
        "work_pool": {"name": WORK_POOL},
    }


class _Quoted(str):
    """A string written in double quotes (a cron reads better quoted; YAML does not need it)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Quoted, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", str(v), style='"'))


def prefect_yaml(params: Params, home: str = ".bctflow", params_path: str = "params.yaml") -> str:
    """The text of prefect.yaml for params' schedule: the nightly deployment, whose flow reads ``params_path`` and
    works in ``home`` (both relative to the worker's directory unless absolute)."""
    import prefect

    check_schedule(params.schedule)
    doc = {
        "name": "bctflow",
        "prefect-version": prefect.__version__,
        "deployments": [_deployment(params, home, params_path)],
    }
    return HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def write_prefect_yaml(path: Path, params: Params, home: str = ".bctflow", params_path: str = "params.yaml") -> str:
    """Write :func:`prefect_yaml` to ``path`` (atomically); the text written."""
    text = prefect_yaml(params, home, params_path)
    atomic_write_text(path, text)
    return text


def serve_limit() -> Any:
    """The deployment's concurrency limit as ``Flow.serve(global_limit=...)`` takes it."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    return ConcurrencyLimitConfig(
        limit=CONCURRENCY_LIMIT, collision_strategy=ConcurrencyLimitStrategy(COLLISION_STRATEGY)
    )
