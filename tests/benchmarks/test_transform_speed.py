"""`bctflow bench transform` (benchmarks/transform_speed.py): its report says whether the transform reached 20× the
re-embedding's items/s, and every committed report is the rendering of its own transform.json, every carried row
stamped with the bridge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.transform_speed import RATIO_BAR, _report, write_transform_report
from flows.runtime.provenance import provenance_line
from tests.conftest import REPO
from tests.flows.runtime.test_provenance import check_provenance

COMMITTED = sorted((REPO / "benchmarks" / "results" / "scale").glob("transform-*/transform.json"))


def _result(ratio: float) -> dict:
    return {
        "items": 1000, "index_type": "flat", "chunk_size": 64, "profile": "cpu", "epochs": 1, "paired_fraction": 0.5,
        "map_kind": "procrustes", "paired_items": 500, "bridge_fit_s": 3.0, "transform_items": 1000,
        "transform_items_per_s": 100.0 * ratio, "transform_backfill_s": 10.0, "transform_peak_rss_mb": 900.0,
        "reembed_items": 1000, "reembed_items_per_s": 100.0, "reembed_backfill_s": 20.0, "reembed_peak_rss_mb": 950.0,
        "items_per_s_ratio": ratio, "command_s_ratio": 2.0, "transform_kind": "transform", "transform_rows": 1000,
        "transform_rows_stamped": 1000, "transform_map": 0.5, "reembed_map": 0.6, "old_map": 0.4,
    }  # fmt: skip


@pytest.mark.parametrize(("ratio", "said"), [(RATIO_BAR + 5, "reached"), (RATIO_BAR - 5, "not reached")])
def test_the_report_says_whether_the_bar_was_reached(ratio: float, said: str):
    md = _report(_result(ratio))
    assert f"**{ratio:.1f}×** — the bar of 20× {said};" in md
    assert "`bctflow bench transform --items 1000 --index flat --chunk-size 64 --epochs 1 --paired-fraction 0.5`" in md


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_a_committed_report_renders_its_own_numbers_and_every_carried_row_names_its_bridge(path: Path):
    res = json.loads(path.read_text())
    assert (path.parent / "report.md").read_text() == _report(res)
    assert res["transform_kind"] == "transform" and res["transform_rows_stamped"] == res["transform_rows"] > 0
    assert res["items_per_s_ratio"] == pytest.approx(res["transform_items_per_s"] / res["reembed_items_per_s"])


def test_the_written_report_records_the_code_and_machine_and_shows_them_in_one_line(tmp_path: Path):
    md = write_transform_report(_result(25.0), tmp_path).read_text()
    res = json.loads((tmp_path / "transform.json").read_text())
    check_provenance(res["provenance"], md)
    assert md.replace(f"provenance: {provenance_line(res.pop('provenance'))}\n\n", "") == _report(res)
