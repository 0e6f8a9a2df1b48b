"""Pieces of ``bctflow bench scale`` (benchmarks/scale.py) that run without the Fashion-MNIST corpus: reading the
backfill's own log lines (its items and rate; its plan against its embedding phase). The store's keys and the cosine
view of a Lorentz corpus: test_scale_store.py. And its report's writer, on a committed run's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.scale import PROJECT_TO, _plan_vs_actual, corpus_rate, projection, write_scale_report
from flows.runtime.provenance import provenance_line
from tests.conftest import REPO
from tests.flows.runtime.test_provenance import check_provenance


def test_the_backfill_log_line_gives_items_and_rate():
    line = (
        "serving corpus: 500288 of 1000000 selected items embedded now (499712 by an earlier run) at 2664 items/s "
        "after 3.2 s of start-up; 977 of 1954 parts resumed"
    )
    out = f"noise\n12:00:01 | INFO | Task run 'embed-parts' - {line}\n"
    assert corpus_rate(out) == (500288, 2664.0)
    with pytest.raises(RuntimeError, match="no 'serving corpus"):
        corpus_rate("the run printed something else")


def test_the_backfills_logged_plan_is_set_against_its_embedding_phase():
    out = "\n".join(
        f"12:00:0{i} | INFO | Task run 'x' - {line}"
        for i, line in enumerate(
            [
                "  predicted wall time 61.5 s (embedding 52.0 s + the rest 6.0 s: Prefect's start-up 3.0 s, the "
                "publish step 2.0 s and the switch to the command's end 1.0 s as backfill 1's run took them; before "
                "the plan 1.5 s, the plan 2.0 s), 0.0171 worker-hours on 1 worker",
                "evaluation gallery: 1000 of 1000 selected items embedded now (0 by an earlier run) at 500 items/s "
                "after 1.5 s of start-up; 0 of 4 parts resumed",
                "serving corpus: 100000 of 100000 selected items embedded now (0 by an earlier run) at 2000 "
                "items/s after 2.5 s of start-up; 0 of 13 parts resumed",
            ]
        )
    )
    # each gallery's start-up + its items at its rate: 1.5 + 2 + 2.5 + 50
    assert _plan_vs_actual(out) == {"plan_predicted_s": 52.0, "plan_actual_s": 56.0, "plan_predicted_total_s": 61.5}
    with pytest.raises(RuntimeError, match="logged no plan"):
        _plan_vs_actual(out.split("\n", 1)[1])


def test_the_written_report_records_the_code_and_machine_and_shows_them_in_one_line(tmp_path: Path):
    committed = REPO / "benchmarks" / "results" / "scale" / "n100000-hnsw-faiss"
    res = json.loads((committed / "scale.json").read_text())
    assert "provenance" not in res  # written before it was recorded: its report is what it was
    md = write_scale_report(res, tmp_path).read_text()
    p = json.loads((tmp_path / "scale.json").read_text())["provenance"]
    check_provenance(p, md)
    assert "| `provenance` |" not in md
    assert md.endswith(projection(res))  # written after that report: the projection follows its table
    without = md.replace(f"provenance: {provenance_line(p)}\n\n", "").removesuffix(projection(res))
    assert without == (committed / "report.md").read_text()


def test_the_report_projects_the_runs_own_rates_to_a_billion_items():
    """Each row recomputed here: the full backfill's items at its rate plus the index at the run's build rate, the
    partial one's fraction at its rate plus the same index, one worker; a run without those rates has none."""
    res = json.loads((REPO / "benchmarks/results/scale/n1000000-hnsw/scale.json").read_text())
    section = projection(res)
    assert PROJECT_TO == (10**7, 10**8, 10**9) and "## This run's rates projected to 10⁹ items" in section
    build = res["items"] / res["index_build_s"]
    for n in PROJECT_TO:
        full = (n / res["backfill_items_per_s"] + n / build) / 3600
        part = (round(0.1 * n) / res["partial_backfill_items_per_s"] + n / build) / 3600
        assert f"| {n:,} | {full:,.1f} | {part:,.1f} | {n / build / 3600:,.1f} |" in section
    assert "| 1,000,000,000 | 102.3 | 27.5 | 18.6 |" in section  # the numbers docs/scale.md quotes
    assert projection({**res, "partial_backfill_items_per_s": None}) == ""
