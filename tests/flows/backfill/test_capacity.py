"""The capacity plan's arithmetic (flows/backfill/capacity.py): each route's seconds and worker-hours recomputed here
item by item from the rates, for one gallery size and for an array of them at once; the index bytes per item against
the files FAISS writes; a nonsense request is one line."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import faiss
import numpy as np
import pytest

from components.errors import ConfigError
from components.indexing.stores.faiss import INDEX_TYPES, IndexConfig
from flows.backfill.capacity import (
    NODE_RAM_GB,
    capacity_lines,
    check_request,
    index_bytes_per_item,
    paired_items,
    project,
    route_costs,
)
from flows.backfill.rates import committed_rates
from tests.conftest import REPO

RATES = {"embed": 3000.0, "partial": 2800.0, "transform": 80_000.0, "pair_s": 0.002, "index_build": 15_000.0}


def _by_hand(n: float, w: int, f: float, pairs: float) -> dict[str, tuple[float, float, float]]:
    """(items, wall seconds, worker-hours) of each route, written out without the module's code."""
    r = RATES
    index = n / r["index_build"]
    full_embed = n / r["embed"] / w
    some = round(f * n)
    part_embed = some / r["partial"] / w
    fit = pairs * r["pair_s"]
    carry = n / r["transform"]
    return {
        "full backfill": (n, full_embed + index, (full_embed * w + index) / 3600),
        "partial backfill": (some, part_embed + index, (part_embed * w + index) / 3600),
        "gallery transform": (n, fit + carry + index, (fit + carry + index) / 3600),
        "adapter": (0, fit, fit / 3600),
    }


@pytest.mark.parametrize(("n", "w", "f"), [(1_000, 1, 0.1), (10**6, 4, 0.35), (10**9, 64, 0.2), (7, 3, 1.0)])
def test_each_routes_time_and_worker_hours_are_the_rates_multiplied_out(n, w, f):
    pairs = 2 * n / 100
    costs = route_costs(n, workers=w, fraction=f, pairs=pairs, **RATES)
    want = _by_hand(n, w, f, pairs)
    assert [c.route for c in costs] == list(want)
    for c in costs:
        items, wall, hours = want[c.route]
        assert float(c.items) == items
        assert float(c.wall_s) == pytest.approx(wall, rel=1e-12)
        assert float(c.worker_hours) == pytest.approx(hours, rel=1e-12)


def test_an_array_of_gallery_sizes_is_projected_at_once_as_each_alone():
    sizes = np.array([1e3, 1e6, 1e8, 1e9])
    rates = committed_rates()
    index = IndexConfig(type="hnsw")
    together = project(sizes, rates, index=index, width=129, map_width=128, paired_fraction=0.01, workers=8)
    for i, n in enumerate(sizes):
        alone = project(int(n), rates, index=index, width=129, map_width=128, paired_fraction=0.01, workers=8)
        for a, b in zip(together.routes, alone.routes):
            assert a.wall_s[i] == float(b.wall_s) and a.worker_hours[i] == float(b.worker_hours)
        assert together.index_size()[i] == float(alone.index_size()) and together.nodes()[i] == float(alone.nodes())


def test_the_projection_uses_the_committed_rates_of_the_route_and_device():
    rates = committed_rates()
    one_m = json.loads((REPO / "benchmarks/results/scale/n1000000-hnsw/scale.json").read_text())
    gpu = json.loads((REPO / "benchmarks/results/perf/cuda-b512/perf.json").read_text())["embedding"]["project_img_s"]
    n, w = 10**9, 4
    kw = {"width": 129, "map_width": 128, "paired_fraction": 0.01, "workers": w}
    cpu = project(n, rates, index=IndexConfig(type="hnsw"), **kw)
    index_s = n / one_m["ingest_items_per_s"]
    assert float(cpu.routes[0].wall_s) == pytest.approx(n / one_m["backfill_items_per_s"] / w + index_s, rel=1e-12)
    assert cpu.fraction == one_m["partial_reembedded"] / one_m["items"] == 0.1
    assert float(cpu.routes[1].wall_s) == pytest.approx(
        1e8 / one_m["partial_backfill_items_per_s"] / w + index_s, rel=1e-12
    )
    cuda = project(
        n, rates, index=IndexConfig(type="hnsw"), device="cuda", fraction=0.5, fraction_why="--fraction", **kw
    )
    ratio = one_m["partial_backfill_items_per_s"] / one_m["backfill_items_per_s"]
    assert float(cuda.routes[0].parallel_s) == pytest.approx(n / gpu / w, rel=1e-12)
    assert float(cuda.routes[1].parallel_s) == pytest.approx(5e8 / (gpu * ratio) / w, rel=1e-12)
    # no committed build of the type: the HNSW build's rate, and the plan says so
    flat = project(n, rates, index=IndexConfig(type="flat"), **kw)
    assert float(flat.routes[0].serial_s) == pytest.approx(index_s, rel=1e-12)
    assert flat.index_rate.what.startswith("no flat build measured: ")
    ivf_s = json.loads((REPO / "benchmarks/results/scale/n100000-ivf/scale.json").read_text())["index_build_s"]
    ivf = project(n, rates, index=IndexConfig(type="ivf"), **kw)
    assert float(ivf.routes[0].serial_s) == pytest.approx(n / (100_000 / ivf_s), rel=1e-12)
    # pairs: 1% of the gallery, at least two per dimension of the map
    assert list(paired_items(np.array([10, 10**9]), 0.01, 128)) == [256, 10**7]


@pytest.mark.parametrize("kind", INDEX_TYPES)
@pytest.mark.parametrize("width", [129, 64])
def test_the_index_bytes_per_item_are_what_faiss_writes_per_item(kind, width):
    """Each type's file grows by the bytes per item the plan multiplies N by (two sizes, the difference): exactly,
    but for HNSW's upper levels, drawn at random per item (the plan counts their expected links: ±0.5 B per item
    is about one standard deviation over 2000 items)."""
    config = IndexConfig(type=kind, nlist=16, train_size=2000, pq_nbits=4)  # 4-bit codes: a quick PQ training
    rng = np.random.default_rng(0)
    sizes = []
    for n in (2000, 4000):
        x = rng.standard_normal((n, width)).astype(np.float32)
        index = faiss.index_factory(width, config.factory_string(width, n))
        index.train(x[: config.train_count(n)]) if config.trained else None
        if config.trained:
            faiss.extract_index_ivf(index).make_direct_map()  # as bctflow's IVF indexes keep one (reconstruct)
        index.add_with_ids(x, np.arange(n, dtype=np.int64))
        with tempfile.TemporaryDirectory() as tmp:
            faiss.write_index(index, str(Path(tmp) / "i"))
            sizes.append((Path(tmp) / "i").stat().st_size)
    per_item = (sizes[1] - sizes[0]) / 2000
    assert per_item == pytest.approx(index_bytes_per_item(config, width), abs=2.0 if kind == "hnsw" else 0.01)


def test_memory_and_the_store_follow_the_index_size():
    rates = committed_rates()
    cap = project(10**9, rates, index=IndexConfig(type="hnsw"), width=129, map_width=128, paired_fraction=0.01)
    hnsw = 4 * 129 + 8 + 8 * 32 + 12 + 4 * 32 / 31
    assert float(cap.vector_bytes) == 1e9 * 129 * 4
    assert float(cap.index_size()) == pytest.approx(1e9 * hnsw)
    assert int(cap.nodes()) == math.ceil(1e9 * hnsw / (NODE_RAM_GB * 1e9)) == 13
    small = project(10**6, rates, index=IndexConfig(type="hnsw"), width=129, map_width=128, paired_fraction=0.01)
    assert int(small.nodes()) == 1
    text = "\n".join(capacity_lines(small))
    assert "fits one 64 GB machine: FAISS files" in text
    with pytest.raises(ValueError, match="one gallery size"):
        capacity_lines(project(np.array([1e6, 1e9]), rates, index=IndexConfig(), width=129, map_width=128,
                               paired_fraction=0.01))  # fmt: skip


def test_the_lines_name_every_rate_with_its_provenance_and_the_anchors_as_cited():
    rates = committed_rates()
    cap = project(10**9, rates, index=IndexConfig(type="hnsw"), width=129, map_width=128, paired_fraction=0.01)
    lines = capacity_lines(cap)
    text = "\n".join(lines)
    for name in (
        "embed",
        "partial",
        "transform",
        "pair_s",
        "index_build_hnsw",
        "store_ingest",
        "store_bulk_ingest",
        "worker_ram",
    ):
        line = next(x for x in lines if x.startswith(f"    {name}: "))
        assert " — measured: " in line and "benchmarks/results/" in line and "(commit " in line, line
    for name in ("gpu_resnet50_int8", "gpu_vitb16_bf16", "gpu_clip_node", "ivfpq_1b", "diskann_1b"):
        assert any(x.startswith(f"    {name}: ") for x in lines), name
    assert "— cited: " in text and "beside the anchors (cited, never measured here)" in text
    full = float(cap.routes[0].wall_s) / 3600
    assert "full backfill: 1,000,000,000 items re-embedded in " in text and f"→ {full:,.1f} h" in text
    # the clip-retrieval anchor is per node of 8 GPUs: 875 per GPU
    assert f"gpu_clip_node: {1e9 / 875 / 3600:,.1f} h" in text and "at 875 items/s per GPU" in text


@pytest.mark.parametrize(
    ("items", "workers", "fraction", "said"),
    [
        (0, 1, 1.0, "--items must be at least 1 (got 0); give the gallery's size, e.g. --items 1000000000"),
        (-5, 1, 1.0, "--items must be at least 1 (got -5)"),
        (10, 0, 1.0, "--workers must be at least 1 (got 0); it is the processes (or GPUs) that embed"),
        (10, 1, 0.0, "--fraction must be in (0, 1] (got 0.0); 1 re-embeds the whole gallery"),
        (10, 1, 1.5, "--fraction must be in (0, 1] (got 1.5)"),
    ],
)
def test_a_request_that_means_nothing_is_one_line(items, workers, fraction, said):
    with pytest.raises(ConfigError, match="^" + said.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        check_request(items, workers, fraction)
