"""One run of `bctflow run` (and of the nightly flow) validates params once, plans once, loads the dataset once
and builds each training's alignment loss once — counted on the real CLI and the real Prefect flow. The params
digest is counted wherever a command computes it: the CLI's "already committed" check, the plan, the nightly check."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from bctflow.cli import app
from components.data import prepare
from components.losses.base import AlignmentLoss
from flows import params as params_module
from flows.generation import changes  # noqa: F401 (loaded before the fixture counts its params digests)
from flows.params import Params
from flows.planning import plan as plan_module

PACKAGES = {"bctflow", "benchmarks", "components", "flows", "registry", "scripts"}


@pytest.fixture
def counts(monkeypatch) -> Counter:
    """Counters around every params validation, params digest, plan, dataset load and alignment-loss construction."""
    seen: Counter = Counter()
    validate = Params.model_validate.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        Params,
        "model_validate",
        classmethod(lambda cls, *a, **k: seen.update(["params validated"]) or validate(cls, *a, **k)),
    )
    plan_init = plan_module.GenerationPlan.__init__
    monkeypatch.setattr(
        plan_module.GenerationPlan, "__init__", lambda self, **k: seen.update(["plans made"]) or plan_init(self, **k)
    )
    loss_init = AlignmentLoss.__init__
    monkeypatch.setattr(
        AlignmentLoss, "__init__", lambda self, *a, **k: seen.update(["losses built"]) or loss_init(self, *a, **k)
    )
    create = prepare.create_dataset
    monkeypatch.setattr(prepare, "create_dataset", lambda *a, **k: seen.update(["dataset loads"]) or create(*a, **k))
    digest = params_module.params_digest
    for name, module in list(sys.modules.items()):  # every project module that imported it by name, and its home
        if name.split(".")[0] in PACKAGES and getattr(module, "params_digest", None) is digest:
            monkeypatch.setattr(module, "params_digest", lambda p: seen.update(["params digests"]) or digest(p))
    prepare.prepared_splits.cache_clear()
    yield seen
    prepare.prepared_splits.cache_clear()


def test_cli_run_parses_and_plans_once_per_generation(
    prefect_harness, tiny_params_file: Path, tmp_path: Path, counts: Counter
):
    home = tmp_path / "ws"
    app(["run", "--home", str(home), "--params", str(tiny_params_file), "--generation", "g0"], standalone_mode=False)
    assert counts == {
        "params validated": 1,
        "plans made": 1,
        "params digests": 1,
        "dataset loads": 1,
        "losses built": 1,
    }
    counts.clear()
    app(["run", "--home", str(home), "--params", str(tiny_params_file), "--generation", "g1"], standalone_mode=False)
    # g1 trains twice (its independent reference φ*, then the HBCT model): one loss each; the dataset is cached
    assert counts == {"params validated": 1, "plans made": 1, "params digests": 1, "losses built": 2}
    counts.clear()
    # the same command again: g1 is the newest generation, by that name, so its params digest decides (nothing to do)
    app(["run", "--home", str(home), "--params", str(tiny_params_file), "--generation", "g1"], standalone_mode=False)
    assert counts == {"params validated": 1, "params digests": 1}


def test_nightly_hands_its_digest_and_fingerprint_to_the_generation(
    prefect_harness, tiny_params_file: Path, tmp_path: Path, counts: Counter
):
    from flows.lifecycle.nightly import nightly_generation

    out = nightly_generation(home=str(tmp_path / "ws"), params_path=str(tiny_params_file))
    assert out["skipped"] is False and out["generation"] == 0
    assert counts == {
        "params validated": 1,
        "params digests": 1,
        "dataset loads": 1,
        "plans made": 1,
        "losses built": 1,
    }
