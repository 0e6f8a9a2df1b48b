"""benchmarks/serve.py: what the serving benchmark's corpus and models are made of, and its report's writer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.scale import scale_params
from benchmarks.scale_corpus import build_scale_corpus
from benchmarks.serve import corpus_image_size, write_serve_report
from benchmarks.serve_prepare import prepare
from components.data.catalog import create_dataset
from components.indexing.live import LivePointer
from flows.runtime.provenance import provenance_line
from tests.conftest import REPO
from tests.flows.runtime.test_provenance import check_provenance


def test_the_serving_corpus_takes_its_image_size_from_the_profile_unless_given():
    assert corpus_image_size("cpu", None) == 16
    assert corpus_image_size("serve_resnet18", None) == 28
    assert corpus_image_size("serve_resnet18", 20) == 20


FASHION = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not FASHION.is_dir(), reason="Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist) missing")
def test_the_prepared_workspace_is_kept_and_a_reusing_run_starts_from_it_unswitched(tmp_path: Path):
    """`bench serve` keeps its workspace as prepared (g0, g1, g1's backfill published, not switched); `--reuse` with
    the same params copies it back without running a generation, and each copy switches on its own."""
    from flows.backfill import switch

    work = tmp_path / "w"
    base = create_dataset("fashion_mnist", tmp_path / "datasets", download=False).train.decode()
    build_scale_corpus(tmp_path / "corpus", 1000, base_images=base.images, base_labels=base.labels, image_size=8)
    raw = scale_params("cpu", tmp_path / "corpus", "hnsw", 8192, 1, None, "faiss")
    raw["data"] |= {"image_size": 8, "max_train_per_class": 20, "max_test_per_class": 10}
    first: dict = {}
    home, plan, index_dir, metrics = prepare(work, raw, True, first, print)  # nothing kept yet: prepared
    assert first["reused_preparation"] is False and first["run_g0_s"] > 0
    switch(plan, Path(index_dir), metrics)
    assert LivePointer(home / "live").pointer()["version"] == 1

    again: dict = {}
    lines: list[str] = []
    home2, plan2, index_dir2, metrics2 = prepare(work, raw, True, again, lines.append)
    assert home2 == home and again["reused_preparation"] is True and again["run_g0_s"] == first["run_g0_s"]
    assert not any(line.startswith("$ bctflow run") for line in lines) and "reusing the workspace" in lines[0]
    assert LivePointer(home / "live").pointer()["version"] == 0  # the kept copy was never switched
    switch(plan2, Path(index_dir2), metrics2)
    assert LivePointer(home / "live").pointer()["version"] == 1


def test_the_written_report_records_the_code_and_machine_and_shows_them_in_one_line(tmp_path: Path):
    committed = REPO / "benchmarks" / "results" / "serve" / "n100000-hnsw"
    res = json.loads((committed / "serve.json").read_text())
    assert "provenance" not in res  # written before it was recorded: its report is what it was
    before = (committed / "report.md").read_text()
    command = re.search(r"^Command: `(.+?)`", before, flags=re.M).group(1)
    md = write_serve_report(res, tmp_path, command).read_text()
    p = json.loads((tmp_path / "serve.json").read_text())["provenance"]
    check_provenance(p, md)
    assert md.replace(f"provenance: {provenance_line(p)}\n\n", "") == before
