"""Manual promotion (flows/generation/promotion.py): the gate applies unless forced; a forced promotion is recorded with
who and why, and moves the MLflow alias ``production``; a retired generation is never promoted."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mlflow import MlflowClient

from components.errors import ConfigError, LineageError
from flows.generation.commit import PRODUCTION_ALIAS
from flows.generation.promotion import promote
from flows.params import Params
from flows.runtime.workspace import Workspace
from registry.records import (
    BackfillRecord,
    DecisionRecord,
    GenerationBundle,
    GenerationRecord,
    PointerRecord,
)
from tests.helpers import generation_record, write_params

MODEL = "bctflow-embedder"
ZETA_FAILURE = {"rule": "zeta_ceiling", "passed": False, "detail": "ζ 3.20 exceeds the ceiling 3.00"}
PASSING = [{"rule": "compatibility", "passed": True, "detail": "cross map 0.61 > self map 0.55"}]


def _record(gid: int, version: str | None, compatible: bool | None, promoted: bool) -> GenerationRecord:
    return generation_record(
        gid,
        None if gid == 0 else 0,
        architecture={},
        alignment="independent" if gid == 0 else "hbct",
        zeta=1.0 + 0.2 * gid,
        checkpoint_path=f"/c/{gid}/model.pt",
        promoted=promoted,
        mlflow_model=MODEL if version else None,
        mlflow_version=version,
        compatible_with_live=compatible,
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A workspace with a real lineage and a real MLflow registry (one version per generation):

    g0 live and in production; g1 incompatible with the live gallery; g2 compatible, every rule held
    (the live gallery accepts its queries); g3 compatible but a backfill rule failed; g4 has no MLflow version.
    """
    home = tmp_path_factory.mktemp("promotion") / "ws"
    params = write_params(home.parent / "params.yaml")
    ws = Workspace(home)
    uri = ws.tracking_uri(params)
    client = MlflowClient(uri, uri)
    client.create_registered_model(MODEL)
    for gid in range(4):
        assert client.create_model_version(MODEL, source=(home / f"m{gid}").as_uri()).version == gid + 1
    client.set_registered_model_alias(MODEL, PRODUCTION_ALIAS, "1")
    store = ws.lineage(params)
    pointer0 = PointerRecord(0, "/i/0/index", "generation 0 embedded the gallery", compatible_generations=[0])
    bundles = [
        GenerationBundle(_record(0, "1", None, True), pointer=pointer0, promotion=(None, "generation 0")),
        GenerationBundle(_record(1, "2", False, False), decision=DecisionRecord(False, [], [], 0)),
        GenerationBundle(
            _record(2, "3", True, False),
            decision=DecisionRecord(False, [], PASSING, 0),
            pointer=PointerRecord(0, "/i/0/index", "g2 passed", compatible_generations=[0, 2]),
        ),
        GenerationBundle(
            _record(3, "4", True, False), decision=DecisionRecord(True, ["ζ ceiling"], [*PASSING, ZETA_FAILURE], 0)
        ),
        GenerationBundle(_record(4, None, True, False), decision=DecisionRecord(False, [], PASSING, 0)),
    ]
    for b in bundles:
        store.commit_generation(b)
    store.close()
    return home


@pytest.fixture
def workspace(template: Path, tmp_path: Path) -> tuple[Params, Workspace]:
    """A private copy of the template workspace (each test may promote)."""
    home = tmp_path / "ws"
    shutil.copytree(template, home)
    return write_params(tmp_path / "params.yaml"), Workspace(home)


def _production(params: Params, ws: Workspace) -> tuple[int | None, str | None]:
    with ws.lineage(params, readonly=True) as store:
        return store.production_generation_id(), ws.tracking(params).alias_version(PRODUCTION_ALIAS)


def _promotions(params: Params, ws: Workspace, gen_id: int) -> list[dict]:
    with ws.lineage(params, readonly=True) as store:
        return store.to_json()[gen_id]["promotions"]


def test_a_gate_failure_is_refused_without_force(workspace):
    params, ws = workspace
    with pytest.raises(ConfigError) as info:
        promote(params, ws, 1, by="alice")
    msg = str(info.value)
    assert "generation 1 failed the promotion gate" in msg and "--force" in msg
    assert "the live gallery does not accept its queries" in msg
    assert _production(params, ws) == (0, "1") and _promotions(params, ws, 1) == []


def test_a_failed_backfill_rule_the_gate_names_is_a_gate_failure_too(workspace, tmp_path: Path):
    _, ws = workspace
    params = write_params(tmp_path / "gated.yaml", ["backfill.gate=[compatibility,not_worse,zeta_ceiling]"])
    with pytest.raises(ConfigError, match=r"ζ 3\.20 exceeds the ceiling 3\.00.*--force"):
        promote(params, ws, 3, by="alice")
    assert _production(params, ws) == (0, "1")


def test_a_failed_check_the_default_gate_does_not_name_is_a_warning_not_a_refusal(workspace):
    params, ws = workspace  # the default backfill.gate: the ζ ceiling is a recorded warning (docs/design.md §9.6)
    assert "zeta_ceiling" not in params.backfill.gate
    out = promote(params, ws, 3, by="alice")
    assert out["forced"] is False and _production(params, ws) == (3, "4")


def test_a_forced_promotion_is_recorded_and_moves_the_alias(workspace):
    params, ws = workspace
    before = datetime.now(UTC).replace(microsecond=0)
    out = promote(params, ws, 1, force=True, by="alice", reason="hotfix for a broken g0")
    assert out["forced"] is True and out["by"] == "alice" and out["previous"] == 0 and out["version"] == "2"
    assert out["live_gallery_accepts_queries"] is False  # promoted, yet the live gallery still refuses its queries
    assert datetime.fromisoformat(out["at"]) >= before
    assert _production(params, ws) == (1, "2")
    [rec] = _promotions(params, ws, 1)
    assert rec["forced"] is True and rec["by"] == "alice" and rec["reason"] == "hotfix for a broken g0"
    with ws.lineage(params, readonly=True) as store:
        doc = store.to_json()
    assert doc[1]["production"] is True and doc[1]["promoted"] is True and doc[0]["production"] is False
    uri = ws.tracking_uri(params)
    tag = MlflowClient(uri, uri).get_model_version(MODEL, "2").tags["bctflow.promotion"]
    assert tag.startswith("promoted (forced by alice at ")
    # the versions' one-line states follow: what MLflow's versions table shows
    described = ws.tracking(params).version_descriptions()
    assert described["2"] == "production (forced); not compatible with the live gallery"
    assert described["1"] == "promoted, no longer production; its embeddings fill the live gallery"


def test_a_forced_promotion_without_a_reason_records_the_overridden_gate(workspace, tmp_path: Path):
    _, ws = workspace
    params = write_params(tmp_path / "gated.yaml", ["backfill.gate=[compatibility,not_worse,zeta_ceiling]"])
    promote(params, ws, 3, force=True, by="bob")
    [rec] = _promotions(params, ws, 3)
    assert rec["forced"] is True and rec["reason"] == f"override of the gate: {ZETA_FAILURE['detail']}"
    assert _production(params, ws) == (3, "4")


def test_a_generation_that_passes_the_gate_is_promoted_without_force(workspace):
    params, ws = workspace
    out = promote(params, ws, 2, by="carol")
    assert out["forced"] is False and out["previous"] == 0 and out["live_gallery_accepts_queries"] is True
    [rec] = _promotions(params, ws, 2)
    assert rec == {**rec, "forced": False, "by": "carol", "reason": "passed the gate"}
    assert _production(params, ws) == (2, "3")
    # force on a generation that passes is not an override (g0, no longer production: g2 is)
    again = promote(params, ws, 0, force=True, by="carol")
    assert (again["forced"], again["already"], again["previous"]) == (False, False, 2)
    assert _production(params, ws) == (0, "1") and _promotions(params, ws, 0)[-1]["forced"] is False


def test_a_generation_without_an_mlflow_version_is_refused(workspace):
    params, ws = workspace
    with pytest.raises(LineageError, match="generation 4 has no MLflow model version"):
        promote(params, ws, 4, force=True, by="alice")
    assert _production(params, ws) == (0, "1")


def test_a_retired_generation_is_refused_even_when_forced(workspace):
    params, ws = workspace
    event = BackfillRecord(
        0, 2, "full", 1.0, "all", 10, 10, "/live/index-v001/index", False, {}, datetime.now(UTC), 1.0
    )
    with ws.lineage(params) as store:
        pointer = PointerRecord(2, "/live/index-v001/index", "full backfill", None, None, [2])
        store.record_backfill(event, pointer, [0, 1])
        assert store.generation(0).status == "retired"
    for force in (False, True):
        with pytest.raises(ConfigError, match="generation 0 is retired"):
            promote(params, ws, 0, force=force, by="alice")
    assert _production(params, ws) == (0, "1") and len(_promotions(params, ws, 0)) == 1  # only generation 0's own


def test_promoting_the_production_generation_says_so_and_records_nothing(workspace):
    """g3 failed a backfill rule, then its full backfill made it production: promoting it again is no gate failure
    and no second promotion (no lineage row, no MLflow alias or tag move)."""
    params, ws = workspace
    event = BackfillRecord(0, 3, "full", 1.0, "all", 10, 10, "/live/index-v001/index", True, {}, datetime.now(UTC), 1.0)
    with ws.lineage(params) as store:
        store.record_backfill(
            event, PointerRecord(3, "/live/index-v001/index", "full backfill", None, 1.0, [3]), [0, 1, 2], promote=True
        )
    uri = ws.tracking_uri(params)
    client = MlflowClient(uri, uri)
    client.set_registered_model_alias(MODEL, PRODUCTION_ALIAS, "4")  # what the backfill's roll-forward does
    tags = {v: client.get_model_version(MODEL, v).tags for v in ("1", "4")}
    before = _promotions(params, ws, 3)
    assert [p["by"] for p in before] == ["backfill"]
    for force in (False, True):
        out = promote(params, ws, 3, force=force, by="alice", reason="again")
        assert out == {**out, "generation": 3, "version": "4", "already": True, "forced": False}
        assert out["live_gallery_accepts_queries"] is True
    assert _production(params, ws) == (3, "4") and _promotions(params, ws, 3) == before
    assert {v: client.get_model_version(MODEL, v).tags for v in ("1", "4")} == tags
