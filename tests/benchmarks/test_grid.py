"""The method table's models trained on a real Dask LocalCluster (benchmarks/grid.py): the same table and the same
model cache as the sequential run, and a grid resumes from what the cache already holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from benchmarks.grid import describe, local_threads, train_grid
from benchmarks.run import run_benchmark
from benchmarks.runner import ModelRequest
from benchmarks.scenarios import make_scenario, run_table
from components.errors import ConfigError
from flows.params.overrides import parse_overrides
from tests.benchmarks.test_bench_runs import tiny_bench

#: a tuned λ (its further seed waits on seed 0's validation results: the second wave), a training-free method
METHODS = [{"name": "bct", "method": "bct", "tune": True}, {"name": "psp", "method": "psp"}]


def _cache(root: Path) -> dict[str, Path]:
    """label → done.json of every finished model in a tiny bench's cache."""
    return {json.loads(d.read_text())["label"]: d for d in (root / "cache" / "cache").glob("*/done.json")}


def _numbers(rows: list) -> list[dict]:
    """The rows as the table reports them, less the wall time of each model."""
    return [{k: v for k, v in r.as_dict().items() if k != "seconds"} for r in rows]


def test_two_worker_processes_give_the_sequential_table_and_cache_and_resume_from_the_cache(tmp_path: Path):
    threads = torch.get_num_threads()
    # CPU kernels' results depend on the thread count in the last bits: run the sequential reference with the
    # threads each of the two workers gets
    torch.set_num_threads(local_threads(2))
    try:
        seq = tiny_bench(tmp_path / "seq", METHODS)
        expected = run_table(seq, make_scenario(seq, "ext_class"))
    finally:
        torch.set_num_threads(threads)
    trained = _cache(tmp_path / "seq")
    assert len(trained) == 7  # old + φ* at seeds 0 and 1, bct at λ 0.3 and 1 (seed 0), bct at the chosen λ (seed 1)

    # a grid killed after the seed-0 old model was written: its folder is already in the cache
    kept = trained["old/euclidean/seed=0"]
    (tmp_path / "par" / "cache" / "cache").mkdir(parents=True)
    shutil.copytree(kept.parent, tmp_path / "par" / "cache" / "cache" / kept.parent.name)
    before = (tmp_path / "par" / "cache" / "cache" / kept.parent.name / "done.json").stat().st_mtime_ns

    par = tiny_bench(tmp_path / "par", METHODS, records=tmp_path / "records")
    lines: list[str] = []
    counts = train_grid(par, make_scenario(par, "ext_class"), workers=2, log=lines.append)
    assert counts == {"trained": 6, "cached": 1}
    # the workers measured each new model against its old model and φ* and kept its record
    labels = sorted(json.loads(f.read_text())["label"] for f in (tmp_path / "records").glob("*.json"))
    assert labels == sorted(["bct/λ=0.3/seed=0", "bct/λ=1/seed=0", f"bct/λ={expected.rows[0].weight:g}/seed=1"])
    assert not any("old/euclidean/seed=0 " in m for m in lines)  # not retrained
    assert any(m.startswith("[grid] wave 2") and ": 1 models to train" in m for m in lines)  # bct seed 1 waited
    assert _cache(tmp_path / "par")["old/euclidean/seed=0"].stat().st_mtime_ns == before
    assert {d.parent.name for d in _cache(tmp_path / "par").values()} == {d.parent.name for d in trained.values()}
    threads_used = {json.loads(d.read_text())["torch_threads"] for d in _cache(tmp_path / "par").values()}
    assert threads_used == {local_threads(2)}

    got = run_table(par, make_scenario(par, "ext_class"))  # every model comes from the cache
    assert not any(m.strip().startswith("training") for m in par.logs)  # type: ignore[attr-defined]
    assert _numbers(got.rows) == _numbers(expected.rows) and got.best_baseline == expected.best_baseline == "bct"
    assert [r.weight for r in got.rows] == [r.weight for r in expected.rows]


def test_the_grid_runs_the_method_table_scenarios_only_and_says_how_it_ran(tmp_path: Path, monkeypatch):
    kw = dict(out=tmp_path, home=tmp_path, params_path=tmp_path / "params.yaml", command="test")
    with pytest.raises(ConfigError, match="sequential runs sequentially"):
        run_benchmark("digits", "sequential", workers=2, **kw)
    with pytest.raises(ConfigError, match="with --scheduler"):
        run_benchmark("digits", "ext_class", workers=2, scheduler="tcp://127.0.0.1:8786", **kw)
    assert describe(0, None).startswith("sequential") and describe(1, None).startswith("sequential")
    assert describe(2, None).startswith("Dask LocalCluster, 2 worker processes")
    assert "tcp://10.0.0.1:8786" in describe(0, "tcp://10.0.0.1:8786")
    from bctflow.cli import app

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.setenv("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    args = ["bench", "--scenario", "partial_backfill", "--workers", "2", "--home", str(tmp_path)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "partial_backfill runs sequentially" in res.output


def test_how_a_step_runs_is_not_part_of_a_models_cache_key(tmp_path: Path):
    """train.compile chooses how the step runs (the same model up to float rounding): a model's cache key does not
    change with it, so models cached before the setting existed are found again; what trains another model does."""
    bench = tiny_bench(tmp_path, METHODS)
    arch = make_scenario(bench, "ext_class").old_arch
    data = bench.selection("all")

    def key(*overrides: str, geometry: str = "lorentz") -> str:
        params = dict(parse_overrides(list(overrides))) or None
        zeta = 1.0 if geometry == "lorentz" else None
        return bench.model_ref("m", ModelRequest(data, geometry=geometry, arch=arch, zeta=zeta, params=params)).key

    plain = key()
    assert key("train.compile=on") == key("train.compile_mode=default") == plain
    assert key("train.lr=0.05") != plain
    # model.mlr_scale came later: at its default (Eq. 9 as published) the key is the one cached before it existed
    assert key("model.mlr_scale=1.0") == plain
    assert key("model.mlr_scale=4.0") != plain
    # the Euclidean head's settings never reach a Lorentz model: its key is the one it had under their old defaults
    # (cosine, BN neck, scale 16), while a Euclidean model's moves with them
    old_head = ("model.classifier=cosine", "model.bn_neck=true", "model.classifier_scale=16")
    assert key(*old_head) == plain
    assert key(*old_head, geometry="euclidean") != key(geometry="euclidean")


def test_an_old_model_below_the_train_criterion_is_trained_again_before_what_trains_against_it(tmp_path: Path):
    """bench.train_criterion on the grid: the old model (1 epoch on digits, far below 0.99) is trained again with twice
    the epochs, and the new model is trained against that one — the same models as one process trains."""
    methods = [{"name": "bct", "method": "bct", "weight": 1.0}]
    settings = {"seeds": [0], "train_criterion": 0.99, "criterion_max_factor": 2, "criterion_roles": ["old"]}
    threads = torch.get_num_threads()
    torch.set_num_threads(local_threads(2))
    try:
        seq = tiny_bench(tmp_path / "seq", methods, **settings)
        expected = run_table(seq, make_scenario(seq, "ext_class"))
    finally:
        torch.set_num_threads(threads)
    labels = sorted(_cache(tmp_path / "seq"))
    assert labels == sorted(["old/euclidean/seed=0", "old/euclidean/seed=0/epochs=2", "reference/euclidean/seed=0",
                             "bct/λ=1/seed=0"])  # fmt: skip
    assert any("old/euclidean/seed=0: train accuracy" in m and "again with 2 epochs" in m for m in seq.logs)  # type: ignore[attr-defined]
    old = json.loads(_cache(tmp_path / "seq")["old/euclidean/seed=0/epochs=2"].read_text())
    assert expected.rows[0].roles["old"]["epochs"] == 2 == old["epochs"]
    assert expected.rows[0].roles["ref"]["epochs"] == 1  # φ* is not held to it here (criterion_roles: old)

    par = tiny_bench(tmp_path / "par", methods, records=tmp_path / "records", **settings)
    counts = train_grid(par, make_scenario(par, "ext_class"), workers=2, log=lambda _m: None)
    assert counts == {"trained": 4, "cached": 0}
    assert {d.parent.name for d in _cache(tmp_path / "par").values()} == {
        d.parent.name for d in _cache(tmp_path / "seq").values()
    }
    (rec,) = [json.loads(f.read_text()) for f in (tmp_path / "records").glob("*.json")]
    assert rec["old_key"] == _cache(tmp_path / "par")["old/euclidean/seed=0/epochs=2"].parent.name
    assert rec["roles"]["old"]["epochs"] == 2 and rec["roles"]["old"]["train_accuracy"] < 0.99
