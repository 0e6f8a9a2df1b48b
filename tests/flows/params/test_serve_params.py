"""params ``serve:`` (flows/params/serve.py): what a service's settings accept."""

from __future__ import annotations

import pytest

from components.errors import ConfigError
from flows.params import load_params
from tests.conftest import REPO


def test_the_switch_grace_is_zero_or_more_seconds():
    """``serve.switch_grace_s``: 0 reports a live/CURRENT that lags the lineage at the first look; below 0 is refused
    in one line."""
    assert load_params(REPO / "params.yaml").serve.switch_grace_s == 10.0
    assert load_params(REPO / "params.yaml", ["serve.switch_grace_s=0"]).serve.switch_grace_s == 0.0
    with pytest.raises(
        ConfigError,
        match=r"with --set overrides: serve\.switch_grace_s: Input should be greater than or equal to 0 \(got -1\)$",
    ):
        load_params(REPO / "params.yaml", ["serve.switch_grace_s=-1"])
