"""``bctflow backfill --plan --items N`` (flows/backfill/capacity_plan.py): without a live gallery, a real CLI process
prints the plan of 10⁹ items from the committed rates, each with its provenance, the cited anchors marked cited, and
writes nothing; in a workspace with a live gallery, the plan's own measurement on a sample replaces the committed
embedding rate and the workspace is left as it was; nonsense is refused in one line before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bctflow.cli import app
from flows.backfill.capacity_plan import capacity_plan
from flows.params import apply_overrides, load_params
from flows.runtime.workspace import Workspace
from tests.conftest import REPO
from tests.helpers import copy_workspace

ONE_M = json.loads((REPO / "benchmarks/results/scale/n1000000-hnsw/scale.json").read_text())


def _files(home: Path) -> dict[str, int]:
    return {str(p.relative_to(home)): p.stat().st_mtime_ns for p in home.rglob("*") if p.is_file()}


def test_a_billion_items_without_a_workspace_is_projected_from_the_committed_rates(tmp_path: Path):
    home = tmp_path / "none"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["backfill", "--plan", "--items", "1000000000", "--home", str(home), "--params", str(REPO / "params.yaml")]
    res = subprocess.run([sys.executable, "-m", "bctflow.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert not home.exists()  # nothing written, not even the workspace folder
    assert out.startswith("capacity plan: 1,000,000,000 items, 1 worker (cpu), index flat (params index.type), rows "
                          "129 float32 wide\n")  # fmt: skip
    report = "benchmarks/results/scale/n1000000-hnsw/scale.json"
    assert f"    embed: {ONE_M['backfill_items_per_s']:,.0f} items/s per worker — measured: " in out
    assert f"{report} `backfill_items_per_s` (commit " in out
    for key in ("partial_backfill_items_per_s", "peak_rss_mb", "ingest_items_per_s"):
        assert f"{report} `{key}` (commit " in out, key
    assert "transform-n1000000-flat/transform.json `transform_items_per_s` (commit " in out
    for cited in ("gpu_resnet50_int8", "gpu_vitb16_bf16", "gpu_clip_node", "ivfpq_1b", "diskann_1b"):
        assert f"    {cited}: " in out, cited
    assert out.count("— cited: ") == 5 and "beside the anchors (cited, never measured here)" in out
    index_s = 1e9 / ONE_M["ingest_items_per_s"]  # no flat build committed: the HNSW build's rate, said so
    full_h = (1e9 / ONE_M["backfill_items_per_s"] + index_s) / 3600
    assert "full backfill: 1,000,000,000 items re-embedded in " in out and f"→ {full_h:,.1f} h" in out
    assert "index_build: " in out and "no flat build measured: " in out
    for route in ("partial backfill: fraction 0.1 (", "gallery transform: 10,000,000 paired items", "adapter: "):
        assert route in out, route
    assert "stored vectors: 1,000,000,000 × 129 float32 = 516.0 GB" in out
    assert f"(no live gallery in {home}: every measured rate is a committed report's)" in out


def test_in_a_workspace_the_plans_own_measurement_replaces_the_committed_embedding_rate(g0_template, tmp_path):
    home, params_file = copy_workspace(g0_template, tmp_path)
    before = _files(home)
    res = CliRunner().invoke(app, ["backfill", "--plan", "--items", "1000000", "--workers", "2", "--home", str(home),
                                   "--params", str(params_file)])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "capacity plan: 1,000,000 items, 2 workers (cpu)" in out
    assert "embed: " in out and "measured now on a sample of " in out and f"({home})" in out
    assert f"(the cpu embedding rate measured now in {home} (generation 0); the other rates committed)" in out
    assert _files(home) == before and not (home / "backfills").exists()

    p = apply_overrides(load_params(params_file), ["backfill.target_map=0.01"])
    cap, _ = capacity_plan(p, Workspace(home), 10**6, workers=2)
    embed = cap.rates["embed"]
    assert embed.kind == "measured" and embed.source.startswith("measured now on a sample of ")
    assert embed.value != ONE_M["backfill_items_per_s"]
    full = cap.routes[0]
    assert float(full.parallel_s) == pytest.approx(1e6 / (embed.value * 2), rel=1e-12)
    # the partial route re-embeds the smallest 10% step the workspace's plan predicts reaches the target
    assert cap.fraction == 0.0 and "backfill.target_map 0.01 in this workspace" in cap.fraction_why
    assert _files(home) == before


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--plan", "--items", "0"], "--items must be at least 1 (got 0); give the gallery's size, e.g. --items "
         "1000000000"),
        (["--plan", "--items", "10", "--workers", "0"], "--workers must be at least 1 (got 0); it is the processes "
         "(or GPUs) that embed"),
        (["--plan", "--items", "10", "--fraction", "0"], "--fraction must be in (0, 1] (got 0.0); 1 re-embeds the "
         "whole gallery"),
        (["--items", "10"], "--items 10 sizes a plan, it runs no backfill; add --plan"),
        (["--plan", "--workers", "4"], "--workers and --device size a capacity plan; add --plan --items N (the "
         "gallery's size)"),
        (["--device", "cuda"], "--workers and --device size a capacity plan; add --plan --items N (the gallery's "
         "size)"),
    ],
)  # fmt: skip
def test_a_capacity_request_that_means_nothing_is_one_line_before_any_work(tmp_path: Path, args, said):
    home = tmp_path / "ws"
    res = CliRunner().invoke(app, ["backfill", *args, "--home", str(home), "--params", str(REPO / "params.yaml")])
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[-1] == f"error: {said}"
    assert not home.exists()
