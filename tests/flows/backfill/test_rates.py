"""The capacity plan's rates (flows/backfill/rates.py): every measured one is the committed report's number at its key,
named with its file, key and the commit git says last changed that file; the cited anchors are marked cited and are
the numbers their sources publish; a missing report or key is one line naming it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from components.errors import ConfigError
from flows.backfill.rates import CITED, MEASURED, RESULTS, committed_rates, repository_root
from tests.conftest import REPO

#: the anchors as their sources publish them (docs/scale.md)
ANCHORS = {
    "gpu_resnet50_int8": 88_714,
    "gpu_vitb16_bf16": 5_059,
    "gpu_clip_node": 7_000,
    "ivfpq_1b": 54,
    "diskann_1b": 5_000,
}


def _report(path: str) -> dict:
    return json.loads((REPO / RESULTS / path).read_text())


def test_each_measured_rate_is_its_committed_reports_number_with_file_key_and_commit():
    rates = committed_rates()
    assert repository_root() == REPO
    one_m = _report("scale/n1000000-hnsw/scale.json")
    transform = _report("scale/transform-n1000000-flat/transform.json")
    perf = _report("perf/cuda-b512/perf.json")
    routes = _report("cpu/routes-ext_class/results.json")
    adapter = next(r for r in routes["mean"] if r["route"] == "adapter" and r["fraction"] == 0.3)
    expected = {
        "embed": one_m["backfill_items_per_s"],
        "partial": one_m["partial_backfill_items_per_s"],
        "partial_fraction": one_m["partial_reembedded"] / one_m["items"],
        "transform": transform["transform_items_per_s"],
        "pair_s": transform["bridge_fit_s"] / transform["paired_items"],
        "index_build_hnsw": one_m["ingest_items_per_s"],
        "index_build_ivf": 100_000 / _report("scale/n100000-ivf/scale.json")["index_build_s"],
        "index_build_ivfsq": 10_000_000 / _report("scale/synthetic-n10000000-faiss/scale.json")["index_build_s"],
        "store_ingest": _report("scale/n1000000-hnsw-milvus/scale.json")["ingest_items_per_s"],
        "store_bulk_ingest": _report("scale/synthetic-n10000000-lancedb/scale.json")["bulk_ingest_items_per_s"],
        "worker_ram": one_m["peak_rss_mb"],
        "scaling_2": _report("scale/n100000-hnsw-faiss/scale.json")["scaling_2_vs_1"],
        "gpu_embed": perf["embedding"]["project_img_s"],
        "adapter_query": adapter["query_us"],
    }
    assert {p.name for p in MEASURED} == set(expected)
    for name, value in expected.items():
        r = rates[name]
        assert r.kind == "measured" and r.value == pytest.approx(value, rel=1e-12), name
    for pick in MEASURED:
        rel = RESULTS / pick.path
        last = subprocess.run(["git", "log", "-1", "--format=%h %cs", "--", str(rel)], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        assert last and rates[pick.name].source.startswith(f"{rel} `{pick.key}`")
        assert f"(commit {last}" in rates[pick.name].source
        assert f" {pick.unit} — measured: {pick.what}; {rel} " in rates[pick.name].line()


def test_the_cited_anchors_are_their_sources_numbers_marked_cited():
    rates = committed_rates()
    assert {r.name: r.value for r in CITED} == ANCHORS
    for r in CITED:
        assert rates[r.name] is r and r.kind == "cited" and r.source and "— cited: " in r.line()
    assert not {r.name for r in CITED} & {p.name for p in MEASURED}


def test_a_missing_report_or_key_is_one_line_naming_it(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"^the committed benchmark report benchmarks/results/scale/n1000000-hnsw/"
                       r"scale\.json is missing or unreadable under .*; run it from a bctflow checkout"):  # fmt: skip
        committed_rates(tmp_path)
    shutil.copytree(REPO / RESULTS, tmp_path / RESULTS, ignore=shutil.ignore_patterns("records", "*.png", "*.md"))
    broken = tmp_path / RESULTS / "scale" / "n1000000-hnsw" / "scale.json"
    doc = json.loads(broken.read_text())
    del doc["backfill_items_per_s"]
    broken.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as err:
        committed_rates(tmp_path)
    msg = str(err.value)
    assert msg == (
        "benchmarks/results/scale/n1000000-hnsw/scale.json holds no number at `backfill_items_per_s`; restore the "
        "committed report (git checkout -- benchmarks/results) or point the capacity plan at a report that has it"
    )
    doc["backfill_items_per_s"] = 1000.0
    broken.write_text(json.dumps(doc))
    rates = committed_rates(tmp_path)  # not a git checkout: read all the same, said so
    assert rates["embed"].value == 1000.0 and "(not a git checkout: no commit known)" in rates["embed"].source
