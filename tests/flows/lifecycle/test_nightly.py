"""The nightly flow both ways (changed / unchanged); its deployment is tests/flows/pipeline/test_deployment.py."""

from __future__ import annotations

from pathlib import Path


def test_nightly_flow_trains_only_when_something_changed(prefect_harness, tiny_params_file: Path, tmp_path: Path):
    from components.code_digest import code_digest
    from flows.lifecycle.nightly import nightly_generation
    from registry.lineage import LineageDB

    home = str(tmp_path / "ws")
    first = nightly_generation(home=home, params_path=str(tiny_params_file))
    assert first["skipped"] is False and first["generation"] == 0 and "empty" in first["reason"]
    second = nightly_generation(home=home, params_path=str(tiny_params_file))
    assert second == {"skipped": True, "reason": second["reason"], "last_generation": 0}
    assert second["reason"].startswith("no change since generation 0") and "same code" in second["reason"]
    third = nightly_generation(home=home, params_path=str(tiny_params_file), overrides=["train.lr=0.05"])
    assert third["skipped"] is False and third["generation"] == 1 and "parameters changed" in third["reason"]
    rows = LineageDB(f"sqlite:///{tmp_path / 'ws' / 'lineage.db'}").to_json()
    assert [g["id"] for g in rows] == [0, 1] and [g["code_digest"] for g in rows] == [code_digest()] * 2
