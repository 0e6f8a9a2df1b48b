"""``bctflow bench store`` (benchmarks/store_scale.py) on 5,000 synthetic rows in each store, for real: two
versions, a build killed with SIGKILL half-way and resumed, both versions sealed, the switches timed; and its
refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from bctflow.cli import app
from benchmarks.store_scale import run_store_scale


@pytest.mark.parametrize("store", ["faiss", "lancedb", "milvus"])
def test_a_store_run_resumes_a_killed_build_and_switches_between_sealed_versions(tmp_path, store):
    md = run_store_scale(5000, store, tmp_path / "out", work=tmp_path / "work", dim=16, chunk_size=500, row_seconds=2)
    r = json.loads((tmp_path / "out" / "scale.json").read_text())
    assert md.read_text().startswith(f"# Store benchmark: 5,000 synthetic rows, store {store}") and r["dim"] == 16
    assert (r["items"], r["store"], r["synthetic"]) == (5000, store, True) and r["provenance"]
    assert (r["rows_after_resume"], r["duplicates_after_resume"], r["unstamped_after_resume"]) == (5000, 0, 0)
    assert r["rollback_checked"] == ["by its seal"] and r["seal_files"][0] < 10  # the parts folder, not each part
    assert 0 < r["alias_flip_s"] < 1 and 0 < r["rollback_s"] < 5 and r["peak_rss_mb"] > 0
    assert r["recall_at_10"] >= 0.8 and r["carry_items_per_s"] > 0 and r["search_qps"] > 0
    if store == "lancedb":  # groups of whole parts, one commit each: the killed build kept some, the rerun the rest
        assert r["write_path"] == "bulk" and 2500 <= r["rows_resumed"] < 5000
        assert r["bulk_ingest_items_per_s"] > 0 and r["ingest_items_per_s"] > 0 and r["ingest_rows_measured"] >= 500
    elif store == "milvus":  # Milvus Lite has the row path only
        assert r["write_path"] == "rows" and r["bulk_ingest_items_per_s"] is None and r["ingest_items_per_s"] > 0
    else:  # the FAISS index is written only when complete: the rerun builds it again from the parts
        assert r["write_path"] == "files" and r["rows_resumed"] == 0
        assert np.isclose(r["ingest_items_per_s"], r["bulk_ingest_items_per_s"])


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--items", "100000", "--store", "qdrant"], "--store 'qdrant' is not a gallery store; use one of faiss"),
        (["--items", "100", "--store", "faiss"], "--items 100 is too few for an IVF-PQ index; use --items 5000"),
    ],
)
def test_an_unknown_store_or_too_few_rows_is_refused_in_one_line_before_any_work(tmp_path, args, line):
    res = CliRunner().invoke(app, ["bench", "store", *args, "--out", str(tmp_path / "out"), "--work", str(tmp_path)])
    assert res.exit_code != 0 and line in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []
