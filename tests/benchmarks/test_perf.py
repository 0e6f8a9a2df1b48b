"""`bctflow bench perf` (benchmarks/perf.py): every ratio measured and written, the flow ratio from recorded compute."""

from __future__ import annotations

import json

import pytest

from benchmarks.perf import _timed, _timed_images, flow_compute, run_perf


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
    assert perf["training"]["images"] == 64  # 1 epoch of 2 full batches
    for section, ratio in (("training", "train_vs_bare"), ("training", "aligned_vs_independent"),
                           ("embedding", "embed_vs_bare"), ("evaluation", "eval_10k_vs_matmul"),
                           ("knn", "knn_lorentz_vs_cosine")):  # fmt: skip
        assert perf[section][ratio] > 0, ratio
    t = perf["training"]
    assert t["train_vs_bare"] == pytest.approx(t["project_img_s"] / t["bare_img_s"], rel=1e-2)
    assert perf["embedding"]["images"] == 600 and perf["evaluation"]["n"] == 10000 and perf["knn"]["n"] == 10000
    report = md.read_text()
    assert "| flow_wall_vs_compute | 1.2 | 12.0 s wall | 10.0 s training |" in report
    assert "train_vs_bare" in report and len(logged) >= 5
