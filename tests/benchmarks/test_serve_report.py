"""Each committed serving report is what the renderer makes of its serve.json, and its checks read the numbers."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.serve_report import render_report
from tests.conftest import REPO

RUNS = sorted((REPO / "benchmarks" / "results" / "serve").glob("*/serve.json"))


def test_the_committed_serving_runs_are_there():
    assert {p.parent.name for p in RUNS} >= {"n100000-hnsw", "n100000-hnsw-28px", "n100000-hnsw-resnet18"}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.parent.name)
def test_a_committed_serving_report_renders_from_its_json_and_its_checks_follow_the_numbers(run):
    res = json.loads(run.read_text())
    md = (run.parent / "report.md").read_text()
    command = re.search(r"^Command: `(.+?)`", md, flags=re.M).group(1)
    assert render_report(res, command) == md
    holds = dict(re.findall(r"^\| (.+?) \| (yes|\*\*no\*\*) \|$", md, flags=re.M))
    assert (holds["vector_vs_inprocess ≥ 0.3 (in-process at the mean served batch)"] == "yes") == (
        res["vector_qps"] / res["inprocess_search_qps"] >= 0.3
    )
    assert (holds["image_vs_bare ≥ 0.8"] == "yes") == (res["image_qps"] / res["bare_forward_qps"] >= 0.8)
    assert (holds["swap_p99_ms ≤ 1.2 × steady_p99_ms"] == "yes") == (res["swap_p99_ms"] <= 1.2 * res["steady_p99_ms"])
    assert res["failed_requests"] == 0 and res["mixed_responses"] == 0
    assert res["refused_incompatible"] == res["incompatible_queries"] > 0
