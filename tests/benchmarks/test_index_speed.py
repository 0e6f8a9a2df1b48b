"""benchmarks/index_speed.py: its report names its command and provenance beside the measured rows."""

from __future__ import annotations

import json

from benchmarks.index_speed import main


def test_the_report_records_command_provenance_and_each_types_build(tmp_path):
    out = tmp_path / "speed.json"
    argv = ["--n", "3000", "--d", "8", "--queries", "50", "--types", "ivfsq", "ivf", "--geometries", "lorentz"]
    rows = main([*argv, "--set", "train_size=3000", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["command"] == "python -m benchmarks.index_speed " + " ".join(
        [*argv, "--set", "train_size=3000", "--out", str(out)]
    )
    assert doc["provenance"]["commit"] and doc["provenance"]["cores"] >= 1
    assert doc["rows"] == rows and [r["factory"] for r in rows] == ["IDMap2,IVF76,SQ8", "IDMap2,IVF76,Flat"]
    assert all(r["n"] == 3000 and r["build_s"] > 0 and 0.5 <= r["recall_at_10"] <= 1.0 for r in rows)
