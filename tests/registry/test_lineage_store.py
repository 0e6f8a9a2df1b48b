"""The lineage database (real SQLAlchemy + SQLite): transactions, JSON export, failure atomicity."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event, text

from components.errors import LineageError
from registry.lineage import LineageDB
from registry.records import (
    DecisionRecord,
    EvaluationRecord,
    GenerationBundle,
    GenerationRecord,
    PointerRecord,
    ZetaRecord,
)
from tests.helpers import generation_record


def record(gid: int, parent: int | None, zeta: float, alignment: str = "hbct") -> GenerationRecord:
    return generation_record(
        gid,
        parent,
        alignment=alignment,
        hyperparameters={"tau": 0.5},
        zeta=zeta,
        mlflow_model="m",
        mlflow_version=str(gid + 1),
        mlflow_run_id=f"r{gid}",
    )


def evals(q: int, g: int, vals: dict[str, float], qrole: str = "model", grole: str = "model") -> list[EvaluationRecord]:
    return [EvaluationRecord(q, g, k, v, qrole, grole) for k, v in vals.items()]


def two_generations(store: LineageDB) -> None:
    store.commit_generation(
        GenerationBundle(
            record(0, None, 1.0, "independent"),
            evaluations=evals(0, 0, {"cmc@1": 0.8, "cmc@5": 0.9, "map": 0.6}),
            zeta=ZetaRecord(None, 0.0, 1.0),
            decision=DecisionRecord(False, [], [], None),
            pointer=PointerRecord(0, "/i/0/index", "generation 0 embedded the gallery", compatible_generations=[0]),
        )
    )
    store.commit_generation(
        GenerationBundle(
            record(1, 0, 1.2),
            evaluations=evals(1, 1, {"cmc@1": 0.95, "cmc@5": 0.99, "map": 0.9})
            + evals(1, 0, {"cmc@1": 0.82, "cmc@5": 0.95, "map": 0.7})
            + evals(1, 1, {"cmc@1": 0.96, "cmc@5": 0.99, "map": 0.92}, "reference", "reference")
            + evals(1, 0, {"cmc@1": 0.1, "cmc@5": 0.3, "map": 0.15}, "reference", "model"),
            derived={
                "p_com/cmc@1": 0.125,
                "p_com/map": 0.3125,
                "p_com_denominator/cmc@1": 0.16,
                "p_com_denominator/map": 0.32,
                "p_up/cmc@1": -0.0104,
                "p_up/map": -0.0217,
            },
            diagnostics={"clip_fraction_gallery": 0.5, "in_cone_fraction": 0.01},
            zeta=ZetaRecord(1.0, 0.2, 1.2),
            decision=DecisionRecord(True, ["clip saturated"], [{"rule": "clip_fraction_max", "passed": False}], 0),
        )
    )


def test_json_export_has_the_documented_schema(db_url: str):
    store = LineageDB(db_url)
    two_generations(store)
    doc = store.to_json()
    assert [g["id"] for g in doc] == [0, 1]
    g0, g1 = doc
    for key in (
        "id",
        "parent",
        "alignment",
        "geometry",
        "zeta",
        "curvature",
        "data_hash",
        "mlflow_model",
        "mlflow_version",
        "backfill_required",
        "backfill_reasons",
        "metrics",
    ):
        assert key in g1
    assert g0["parent"] is None and g0["live"] is True and g1["live"] is False
    assert g0["metrics"]["cross"] is None and g0["metrics"]["parent_self"] is None and g0["metrics"]["p_com"] is None
    assert g0["metrics"]["reference"] is None
    m = g1["metrics"]
    assert m["self"] == {"cmc@1": 0.95, "cmc@5": 0.99, "map": 0.9}
    assert m["cross"] == {"cmc@1": 0.82, "cmc@5": 0.95, "map": 0.7}
    assert m["parent_self"] == {"cmc@1": 0.8, "cmc@5": 0.9, "map": 0.6}
    assert m["p_com"] == {"cmc@1": 0.125, "map": 0.3125}
    assert m["p_up"] == {"cmc@1": -0.0104, "map": -0.0217}
    assert m["reference"]["self"]["map"] == 0.92 and m["reference"]["cross"]["map"] == 0.15
    assert m["against"] == {"0": {"cmc@1": 0.82, "cmc@5": 0.95, "map": 0.7}}
    assert g1["zeta"] == pytest.approx(g0["zeta"] + 0.2)
    assert g1["zeta_step"] == {"parent_zeta": 1.0, "delta": 0.2, "restarted": False}
    assert g1["backfill_required"] is True and g1["backfill_reasons"] == ["clip saturated"]
    assert g1["diagnostics"]["in_cone_fraction"] == 0.01
    assert store.live_pointer().generation_id == 0 and store.next_generation_id() == 2


def test_failure_before_commit_writes_nothing(db_url: str):
    store = LineageDB(db_url)
    bundle = GenerationBundle(
        record(0, None, 1.0),
        evaluations=evals(0, 0, {"map": 0.5}),
        zeta=ZetaRecord(None, 0.0, 1.0),
        pointer=PointerRecord(0, "/i/0/index", "generation 0 embedded the gallery", compatible_generations=[0]),
    )

    def boom() -> None:
        raise RuntimeError("disk full while moving artifacts")

    with pytest.raises(RuntimeError, match="disk full"):
        store.commit_generation(bundle, before_commit=boom)
    assert store.count() == 0 and store.evaluations() == [] and store.live_pointer() is None
    store.commit_generation(bundle)  # the same bundle commits cleanly afterwards
    assert store.count() == 1


def test_database_error_rolls_back_everything(db_url: str):
    """A real constraint failure inside the transaction (duplicate evaluation row) leaves no trace."""
    store = LineageDB(db_url)
    dup = evals(0, 0, {"map": 0.5}) * 2
    with pytest.raises(LineageError, match="rolled back"):
        store.commit_generation(
            GenerationBundle(
                record(0, None, 1.0),
                evaluations=dup,
                pointer=PointerRecord(0, "/i/0/index", "generation 0 embedded the gallery", compatible_generations=[0]),
            )
        )
    assert store.count() == 0
    with store.transaction() as s:
        assert s.execute(text("select count(*) from gallery_pointers")).scalar() == 0


def test_existing_generation_id_is_refused(db_url: str):
    store = LineageDB(db_url)
    two_generations(store)
    with pytest.raises(LineageError, match="already exists"):
        store.commit_generation(GenerationBundle(record(1, 0, 1.2)))


def test_unknown_generation_lookup_names_the_fix(db_url: str):
    store = LineageDB(db_url)
    with pytest.raises(LineageError, match="bctflow lineage"):
        store.generation(7)


def test_any_sqlalchemy_url_works(tmp_path: Path):
    store = LineageDB("sqlite://")  # in-memory
    two_generations(store)
    assert len(store.to_json()) == 2


def _closed_connections(store: LineageDB) -> list[object]:
    """The DB-API connections the store's engine closes from now on."""
    closed: list[object] = []
    event.listen(store.engine, "close", lambda dbapi_conn, _record: closed.append(dbapi_conn))
    return closed


def test_a_store_in_a_with_block_is_closed_when_the_block_ends(tmp_path: Path):
    store = LineageDB(f"sqlite:///{tmp_path / 'lineage.db'}")
    closed = _closed_connections(store)
    with store as entered:
        assert entered is store and store.count() == 0
        assert store.engine.pool.checkedin() == 1 and closed == []  # the pooled connection stays open in the block
    assert len(closed) == 1 and store.engine.pool.checkedin() == 0  # closing released it


def test_a_with_block_that_raises_still_closes_the_store(tmp_path: Path):
    store = LineageDB(f"sqlite:///{tmp_path / 'lineage.db'}")
    closed = _closed_connections(store)
    with pytest.raises(LineageError, match="generation 7 is not in the lineage"), store:
        store.generation(7)
    assert len(closed) == 1 and store.engine.pool.checkedin() == 0
