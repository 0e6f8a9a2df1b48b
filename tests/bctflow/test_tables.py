"""The lineage table of `bctflow lineage` / `bctflow chain` (bctflow/tables.py): its rows from the JSON document, its
backfill notes from the lineage's timeline, where the live gallery's vectors live from its pointer row."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from bctflow.tables import LINEAGE_COLUMNS, lineage_table
from registry.records import BackfillRecord, DecisionRecord, GenerationBundle, PointerRecord
from tests.helpers import generation_record, lineage_story


def test_the_lineage_table_notes_the_backfills_of_the_timeline(tmp_path: Path):
    with lineage_story(tmp_path / "lineage.db") as store:
        table = lineage_table(store.to_json(), store.timeline())
    assert [c.header for c in table.columns][:3] == ["gen", "parent", "alignment"]
    assert list(table.columns[0].cells) == ["0", "1", "2"]
    assert list(table.columns[-2].cells) == ["retired", "● gallery", "★ production (forced)"]
    assert table.caption == "\n".join(
        [
            "⟲ backfill 1: full with g1 (539/539 items, ζ restarted, 1s)",
            "● live gallery: milvus collection demo_g1_v1, index HNSW, rows g1 539",  # the live pointer's row
        ]
    )


CLIP = "99% of gallery embeddings sit on the clip radius > 95%"


def _backfill_with_g3(store, kind: str, version: int, fraction: float, promote: bool) -> int:
    """A ``kind`` backfill with g3 (the live gallery: version ``version``) recorded as bctflow backfill does."""
    n = round(539 * fraction)
    event = BackfillRecord(
        1, 3, kind, fraction, "all", 539, n, f"/live/v{version}/index", False, {}, datetime.now(UTC), 2.0
    )
    pointer = PointerRecord(3, f"/live/v{version}/index", f"{kind} backfill with generation 3", None, 1.0, [3])
    return store.record_backfill(event, pointer, [1, 2] if kind == "full" else [], promote=promote)


def test_a_full_backfill_shows_the_backfill_done_and_its_reasons_as_warnings(tmp_path: Path):
    """g3's decision required a backfill (the clip radius): "yes (1)" and its reason while none or only a partial
    one ran; after its full backfill "done (event N)" and the reason as a warning, in the table and in the JSON."""
    with lineage_story(tmp_path / "lineage.db") as store:
        g3 = generation_record(3, 1, alignment="hbct", zeta=1.4, mlflow_version="4", mlflow_run_id="run3")
        g3.compatible_with_live = True
        store.commit_generation(GenerationBundle(g3, decision=DecisionRecord(True, [CLIP], [], 1)))
        partial = _backfill_with_g3(store, "partial", 2, 0.3, promote=False)
        doc = store.to_json()
        table = lineage_table(doc, store.timeline())
        assert [g["backfill_done"] for g in doc] == [None, 1, None, None]  # g1's full backfill; g3's was partial
        assert list(table.columns[LINEAGE_COLUMNS.index("backfill")].cells) == [
            "retired",
            "done (event 1)",
            "—",
            "yes (1)",
        ]  # g0: its gallery replaced by g1
        assert f"g3: {CLIP}" in table.caption.splitlines()
        full = _backfill_with_g3(store, "full", 3, 1.0, promote=True)
        doc = store.to_json()
        table = lineage_table(doc, store.timeline())
    assert (partial, full) == (2, 3)
    assert doc[3]["backfill_done"] == 3 and doc[3]["backfill_required"] is True and doc[3]["production"] is True
    assert list(table.columns[LINEAGE_COLUMNS.index("backfill")].cells)[3] == "done (event 3)"
    notes = table.caption.splitlines()
    assert f"g3 warning (backfill 3 done): {CLIP}" in notes
    assert not any(n.startswith("g3: ") for n in notes), notes  # no longer stated as a backfill to do
    assert "⟲ backfill 3: full with g3 (539/539 items, 2s)" in notes
