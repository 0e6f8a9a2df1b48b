"""`bctflow bench perf` (benchmarks/perf.py): every ratio measured and written, the flow ratio from recorded compute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.perf import _timed, _timed_images, flow_compute, run_perf
from benchmarks.perf_report import perf_report
from tests.conftest import REPO
from tests.flows.runtime.test_provenance import check_provenance

COMMITTED = sorted((REPO / "benchmarks" / "results" / "perf").glob("*/perf.json"))
RATIOS = ("train_vs_bare", "aligned_vs_independent", "embed_vs_bare", "eval_10k_vs_matmul", "knn_lorentz_vs_cosine")


def _quotient(num: float, den: float, units: tuple[float, float, float]):
    """num / den, as exact as perf.json's rounding allows: ``units`` are the last digits of num, den and the ratio."""
    q = num / den
    return pytest.approx(q, abs=units[2] / 2 + 1.01 * q * (units[0] / 2 / num + units[1] / 2 / den))


def test_the_first_epoch_is_a_warm_up_when_there_are_several():
    assert _timed([0.0, 5.0, 7.0, 9.5]) == 4.5  # epochs 2 and 3 (the first held compilation, cuDNN's search)
    assert _timed_images(3, 10, 32) == 2 * 10 * 32
    assert _timed([1.0, 4.0]) == 3.0 and _timed_images(1, 10, 32) == 320  # one epoch: the whole run


def test_flow_compute_divides_wall_by_the_recorded_training_seconds(tmp_path):
    for gen, metrics in ((0, {"train_seconds": 10.0, "reference_train_seconds": None}),
                         (1, {"train_seconds": 20.0, "reference_train_seconds": 10.0})):  # fmt: skip
        d = tmp_path / "generations" / f"gen_{gen:03d}"
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(json.dumps(metrics))
    got = flow_compute(tmp_path, 48.0)
    assert got == {"generations": 2, "wall_s": 48.0, "compute_s": 40.0, "flow_wall_vs_compute": 1.2}
    assert flow_compute(tmp_path / "empty", 5.0)["flow_wall_vs_compute"] is None


def test_run_perf_measures_every_ratio_and_writes_json_and_report(tmp_path):
    logged = []
    md = run_perf(
        tmp_path / "out",
        device="cpu",
        batch=32,
        train_images=64,
        epochs=1,
        embed_images_n=600,
        repeats=1,
        flow=lambda: {"generations": 2, "wall_s": 12.0, "compute_s": 10.0, "flow_wall_vs_compute": 1.2},
        log=logged.append,
    )
    perf = json.loads((tmp_path / "out" / "perf.json").read_text())
    assert perf["precision"] == "fp32" and perf["device"].startswith("cpu")
    t, e, v, k = perf["training"], perf["embedding"], perf["evaluation"], perf["knn"]
    assert t["images"] == 64 and e["images"] == 600 and v["n"] == 10000 and k["n"] == 10000  # 1 epoch of 2 batches
    # each ratio is the project side over the baseline side written beside it (speeds), or the inverse (seconds)
    assert t["train_vs_bare"] == _quotient(t["project_img_s"], t["bare_img_s"], (0.1, 0.1, 1e-3))
    assert t["aligned_vs_independent"] == _quotient(t["project_img_s"], t["hbct_img_s"], (0.1, 0.1, 1e-3))
    assert e["embed_vs_bare"] == _quotient(e["project_img_s"], e["bare_img_s"], (0.1, 0.1, 1e-3))
    assert v["eval_10k_vs_matmul"] == _quotient(v["eval_s"], v["matmul_s"], (1e-3, 1e-4, 1e-2))
    assert k["knn_lorentz_vs_cosine"] == _quotient(k["lorentz_s"], k["cosine_s"], (1e-4, 1e-4, 1e-3))
    report = md.read_text()
    assert f"| train_vs_bare | {t['train_vs_bare']} | {t['project_img_s']} img/s | {t['bare_img_s']} img/s |" in report
    assert (
        f"| knn_lorentz_vs_cosine | {k['knn_lorentz_vs_cosine']} | {k['lorentz_s']} s | {k['cosine_s']} s |" in report
    )
    assert "| flow_wall_vs_compute | 1.2 | 12.0 s wall | 10.0 s training |" in report
    assert all(f"| {name} | " in report for name in RATIOS) and len(logged) >= 5
    check_provenance(perf["provenance"], report)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_a_committed_report_is_the_rendering_of_its_perf_json(path: Path):
    """Reports written before the provenance was recorded render as they were."""
    assert perf_report(json.loads(path.read_text())) == (path.parent / "report.md").read_text()
