"""The lineage table of `bctflow lineage` / `bctflow chain` (bctflow/tables.py): its rows from the JSON document, its
backfill notes from the lineage's timeline, where the live gallery's vectors live from its pointer row."""

from __future__ import annotations

from pathlib import Path

from bctflow.tables import lineage_table
from tests.helpers import lineage_story


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
