"""How a command's flow ends (bctflow/shell.py ``finish``): a Prefect API that stops answering mid-run is one line."""

from __future__ import annotations

import logging

import httpx
import pytest
import typer

from bctflow.shell import finish


def test_a_configured_prefect_api_that_stops_answering_mid_run_is_one_line(capsys, monkeypatch):
    """What Prefect's client raises once its retries of a gone server run out (a configured `prefect server start`
    stopped mid-backfill): exit 1 and one line naming the API and the way on, not Prefect's traceback; the log
    shipper's failed sends at exit are silenced. (A temporary server that dies is caught sooner, by its watch:
    tests/flows/runtime/test_prefect_api.py.)"""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setattr(logging, "raiseExceptions", True)

    def lost() -> None:
        raise httpx.ConnectError("[Errno 111] Connection refused\nmore")

    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:4200/api"}), pytest.raises(typer.Exit) as stopped:
        finish(lost, "backfill")
    err = capsys.readouterr().err.strip().splitlines()
    assert stopped.value.exit_code == 1 and len(err) == 1, err
    assert err[0].startswith("backfill stopped: the Prefect API (http://127.0.0.1:4200/api) stopped answering"), err
    assert "ConnectError: [Errno 111] Connection refused)" in err[0] and "run the same command again" in err[0]
    assert logging.raiseExceptions is False
