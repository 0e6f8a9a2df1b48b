"""The lineage's nights (registry/night_ledger.py, revision 0010): decided → acting → done in three transactions, a
night decided once (a rerun finds it), its outcome recorded the night after; a lineage before the revision has none
and is migrated by `bctflow db-upgrade`."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect

from components.errors import LineageError
from registry import schema_version
from registry.lineage import LineageDB
from registry.records import GenerationBundle, NightRecord
from tests.helpers import generation_record


def _record(key: str = "night-01", action: str = "full") -> NightRecord:
    return NightRecord(
        key,
        "always",
        1,
        0,
        0,
        action,
        1.0,
        1,
        "a full backfill with every new generation",
        0.8,
        0.5,
        [{"action": "keep", "forecast_map": 0.5}],
        [{"rule": "compatibility", "passed": True}],
    )


def _two_generations(db_url: str) -> LineageDB:
    store = LineageDB(db_url)
    store.commit_generation(GenerationBundle(generation_record(0)))
    store.commit_generation(GenerationBundle(generation_record(1, parent=0)))
    return store


def test_a_night_is_decided_once_acted_on_and_done_with_its_cost_and_outcome(db_url: str):
    store = _two_generations(db_url)
    row = store.nights.decide(_record())
    assert (row.state, row.action, row.target_generation_id, row.items) == ("decided", "full", 1, 0)
    with pytest.raises(LineageError, match=r"night 'night-01' was decided already; a night is decided once"):
        store.nights.decide(_record())
    assert store.nights.acting("night-01").state == "acting"
    done = store.nights.done("night-01", items=539, compute_s=12.5, carry=None)
    assert (done.state, done.items, done.compute_s, done.finished_at is not None) == ("done", 539, 12.5, True)
    store.nights.decide(_record("night-02", "keep"))
    assert store.nights.outcome("night-01", 0.77).outcome_map == 0.77
    assert [n.night for n in store.nights.all()] == ["night-01", "night-02"]
    assert store.nights.last().night == "night-02" and store.nights.night("night-09") is None
    with pytest.raises(LineageError, match=r"night 'night-09' was never decided; decide it before acting on it"):
        store.nights.acting("night-09")
    store.close()


def test_a_read_only_store_records_no_night(db_url: str):
    _two_generations(db_url).close()
    with LineageDB(db_url, readonly=True) as ro, pytest.raises(LineageError):
        ro.nights.decide(_record())


def test_revision_0010_adds_the_nights_table_and_a_lineage_before_it_has_none(db_url: str):
    store = _two_generations(db_url)
    store.nights.decide(_record())
    store.close()
    engine = create_engine(db_url)
    schema_version.downgrade(engine, "0009_route_choices")  # the lineage as the previous bctflow wrote it
    assert "nights" not in inspect(engine).get_table_names()
    engine.dispose()
    with pytest.raises(LineageError, match=r"older than .*run `bctflow db-upgrade`"):
        LineageDB(db_url)
    upgraded = LineageDB(db_url, upgrade=True)
    assert upgraded.upgraded == [f"migrated 0009_route_choices → {schema_version.head_revision()}"]
    assert upgraded.nights.all() == [] and [g.id for g in upgraded.generations()] == [0, 1]
    upgraded.close()
