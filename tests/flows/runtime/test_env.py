"""Prefect reports a run that failed with a bctflow error in one line (no traceback); other exceptions keep theirs.
A real flow run under prefect_test_harness."""

from __future__ import annotations

import logging
import os

import pytest
from prefect import flow, task

from components.errors import DataError
from flows.runtime.env import RUN_LOGGERS, KnownErrorFilter, _quiet_known_failures


@task
def _fails(exc: Exception) -> None:
    raise exc


@flow
def _run(exc: Exception) -> None:
    _fails(exc)


def _reports(caplog, exc: Exception) -> list[logging.LogRecord]:
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="prefect"), pytest.raises(type(exc)):
        _run(exc)
    reports = ("Task run failed with exception", "Encountered exception during execution")  # Prefect's wording
    return [r for r in caplog.records if r.name in RUN_LOGGERS and r.getMessage().startswith(reports)]


def test_a_bctflow_error_is_reported_without_traceback_and_a_bug_with_one(prefect_harness, caplog):
    _quiet_known_failures()
    _quiet_known_failures()  # idempotent: one filter per logger
    for name in RUN_LOGGERS:
        assert sum(isinstance(f, KnownErrorFilter) for f in logging.getLogger(name).filters) == 1
    known = _reports(caplog, DataError("classes [10] do not exist; fix `classes:`"))
    assert {r.name for r in known} == set(RUN_LOGGERS)  # the task and the flow each report it...
    assert all(r.exc_info is None and "classes [10] do not exist" in r.getMessage() for r in known)  # ...in one line
    bug = _reports(caplog, ZeroDivisionError("division by zero"))
    assert bug and all(r.exc_info is not None for r in bug)


def test_the_startup_timeout_is_prefects_setting_with_a_default_for_a_loaded_machine(monkeypatch):
    from components.errors import ConfigError
    from flows.runtime.env import STARTUP_TIMEOUT_S, STARTUP_TIMEOUT_VAR, startup_timeout

    monkeypatch.delenv(STARTUP_TIMEOUT_VAR, raising=False)
    assert startup_timeout() == STARTUP_TIMEOUT_S == 120 and os.environ[STARTUP_TIMEOUT_VAR] == "120"  # Prefect's too
    monkeypatch.setenv(STARTUP_TIMEOUT_VAR, "300")
    assert startup_timeout() == 300  # the user's value wins
    for bad in ("2m", "0", "-5", ""):
        monkeypatch.setenv(STARTUP_TIMEOUT_VAR, bad)
        with pytest.raises(ConfigError, match=rf"{STARTUP_TIMEOUT_VAR}='{bad}': .* whole number of seconds ≥ 1"):
            startup_timeout()
