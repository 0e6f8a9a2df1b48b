"""``bctflow upgrade`` (flows/upgrade/bridge.py): bridges fitted between real generations of a workspace on a paired
sample of the training split, measured on the labelled split, recorded in MLflow and the lineage, chained across
three generations — and the refusals that record nothing."""

from __future__ import annotations

import dataclasses
import io
import math
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner, Result

from bctflow.cli import app
from components.bridges.base import Bridge, fitting_space, relative_error
from components.bridges.chain import BridgeChain
from components.errors import CheckpointMismatchError, ConfigError, LineageError
from components.evaluation.retrieval import gallery_metrics
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from components.io import file_sha256
from flows.params import apply_overrides, load_params
from flows.runtime.workspace import Workspace
from flows.upgrade import bridge as bridge_fit
from flows.upgrade.bridge import fit_route, paired_count, paired_positions
from registry.tracking.common import metric_key
from tests.conftest import REPO
from tests.helpers import first_generation, generation_record, lineage_story, run_generation, write_params

PAIRED = 0.25  # of the digits demo's ~540-row live gallery: ~135 pairs, the 16-wide tiny models need 32


@pytest.fixture(scope="module")
def three(prefect_harness, tmp_path_factory) -> tuple[Path, Path]:
    """(home, params file): g0 on digits 0–4, then g1 and g2 on every class, each trained without alignment (the
    adapter's and the transform's case: a new model free of its parent)."""
    home, params = first_generation(tmp_path_factory.mktemp("routes"), [f"upgrade.paired_fraction={PAIRED}"])
    for name in ("g1", "g2"):
        run_generation(home, params, {"name": name, "classes": "all", "alignment": "independent", "reference": False})
    return home, params


def _labelled(home: Path, g: int):
    return GalleryParts(GalleryVersion(Workspace(home).generation_dir(g)).evaluation_store).embeddings()


def _bridges(home: Path, params: Path) -> list[tuple]:
    with Workspace(home).lineage(load_params(params), readonly=True) as store:
        return [(b.from_generation_id, b.to_generation_id, b.role, b.version) for b in store.bridges()]


def test_the_pairs_are_a_seeded_fraction_of_the_gallery_drawn_from_the_training_split():
    a = paired_positions(1000, 500, seed=0)
    assert len(a) == 500 and len(np.unique(a)) == 500 and a.max() < 1000 and (np.diff(a) > 0).all()
    np.testing.assert_array_equal(a, paired_positions(1000, 500, seed=0))
    assert not np.array_equal(a, paired_positions(1000, 500, seed=1))
    assert len(paired_positions(100, 500, seed=0)) == 100  # at most the whole training split


def test_the_paired_sample_is_the_fraction_raised_to_two_per_dimension_within_the_training_split():
    """The shipped 1 % of the demo's 539-item gallery is 6 pairs; a 128-wide map needs 256, a 16-wide one 32."""
    of = "upgrade.paired_fraction 0.01 of the 539-item live gallery"
    assert paired_count(1258, 539, 0.01, 128) == (256, f"2 per dimension of the 128-wide map — {of} would be 6")
    assert paired_count(1258, 539, 0.01, 16) == (32, f"2 per dimension of the 16-wide map — {of} would be 6")
    assert paired_count(1258, 539, 0.01, 4) == (16, f"2 per dimension of the 4-wide map — {of} would be 6")  # ≥ 16
    assert paired_count(100_000, 50_000, 0.01, 128) == (500, "upgrade.paired_fraction 0.01 of the 50,000-item live "
                                                              "gallery")  # fmt: skip
    assert paired_count(1258, 539, 1.0, 16) == (539, "upgrade.paired_fraction 1 of the 539-item live gallery")
    assert paired_count(400, 5000, 0.5, 16) == (
        400,
        "the whole training split — upgrade.paired_fraction 0.5 of the 5,000-item live gallery would be 2,500",
    )
    assert paired_count(256, 539, 0.01, 128)[0] == 256  # exactly two per dimension: accepted
    with pytest.raises(ConfigError) as err:
        paired_count(255, 539, 0.01, 128)
    assert str(err.value) == (
        "a bridge of 128-wide vectors needs at least 256 paired items (2 per dimension) from the training split, "
        "which holds 255; give the dataset a larger training split (data.test_fraction, data.max_train_per_class)"
    )


def test_an_adapter_carries_a_free_models_queries_into_the_old_gallery_and_is_recorded_in_mlflow_and_the_lineage(three):
    """g1 was trained without alignment: its raw queries against g0's gallery are near chance; through the adapter
    fitted on paired training items they retrieve far better. The file, the MLflow version and the lineage row agree."""
    home, params = three
    p, ws = load_params(params), Workspace(home)
    r = fit_route(p, ws, generation=1, role="adapter")
    assert (r.role, r.source, r.target, r.kind, r.version) == ("adapter", 1, 0, "procrustes", 1)
    g0, g1 = _labelled(home, 0), _labelled(home, 1)
    raw = gallery_metrics(g1, g0)["map"]
    assert r.served["map"] > raw, (r.served, raw)  # g1's queries carried into g0's space retrieve better than raw
    bridge = Bridge.load(Path(r.path))  # on the labelled split, never paired: nearer g0's vectors than g1's own
    x, y = fitting_space(g1), fitting_space(g0)
    assert relative_error(bridge.map_vectors(x), y) < 0.9 * relative_error(x, y)
    assert r.full["map"] == pytest.approx(gallery_metrics(g1, g1)["map"])
    assert r.old["map"] == pytest.approx(gallery_metrics(g0, g0)["map"])
    assert r.recovered == pytest.approx(r.served["map"] / r.full["map"]) and 0 < r.us_per_query < 1000
    assert r.sample == math.ceil(PAIRED * len(g0)) > 32  # the live gallery is g0's labelled split; 32: 2 per dim
    assert r.sample_why == f"upgrade.paired_fraction {PAIRED} of the {len(g0):,}-item live gallery"
    assert file_sha256(Path(r.path)) == r.sha256
    loaded = Bridge.load(Path(r.path), sha256=r.sha256, source=1, target=0)
    np.testing.assert_allclose(
        loaded.map_gallery(g1).emb, Bridge.load(Path(r.path)).map_gallery(g1).emb
    )  # the file is the fitted map
    assert _bridges(home, params) == [(1, 0, "adapter", 1)]
    with ws.lineage(p, readonly=True) as store:
        row = store.bridges()[0]
    assert (row.path, row.sha256, row.sample, row.mlflow_version) == (r.path, r.sha256, r.sample, r.mlflow_version)
    client = ws.tracking(p, readonly=True).client()
    version = client.get_model_version(f"{p.tracking.registered_model}-bridges", r.mlflow_version)
    assert version.tags["bctflow.bridge.sha256"] == r.sha256 and version.tags["bctflow.bridge.role"] == "adapter"
    run = client.get_run(version.run_id)
    assert run.data.metrics["served_map"] == pytest.approx(r.served["map"])
    assert run.data.metrics["recovered_map"] == pytest.approx(r.recovered)
    assert r.recovered_recall10 == pytest.approx(r.served["cmc@10"] / r.full["cmc@10"])  # Drift-Adapter's metric
    assert run.data.metrics[metric_key("recovered_cmc@10")] == pytest.approx(r.recovered_recall10)
    assert r.full["cmc@10"] == pytest.approx(gallery_metrics(g1, g1, (1, 10))["cmc@10"])


def test_the_query_service_carries_a_new_generations_queries_through_its_adapter_chain(three):
    """The service (flows/serving) reads the adapter chains from the lineage: g2's vector is refused with 409 until
    its adapter is recorded, then the watch's key changes, the reloaded version carries g2's queries g2 → g1 → g0
    into g0's gallery — the same vectors the route's measurement searched — and a tampered map never serves."""
    from components.errors import IndexIntegrityError
    from flows.generation.promotion import promote
    from flows.serving.metrics import ServeMetrics
    from flows.serving.queries import (
        ImageQuery,
        QueryError,
        answer_vectors,
        check_vector_query,
        decode_query,
        embed_images,
        search_images,
    )
    from flows.serving.swap import SwapManager
    from flows.serving.version import load_version

    home, params = three
    p, ws = load_params(params), Workspace(home)
    if (1, 0, "adapter", 1) not in _bridges(home, params):
        fit_route(p, ws, generation=1, role="adapter")
    manager = SwapManager(ws, p, ServeMetrics(), device="cpu")
    manager.reload(force=True)
    v = manager.current
    assert v.facts.compatible == (0,) and sorted(v.adapters) == [1], (v.facts.compatible, v.adapters)
    g2 = _labelled(home, 2)
    queries = g2.emb[:5].astype(np.float64)
    with pytest.raises(QueryError) as err:
        check_vector_query(v, queries[0].tolist(), 2, 10)
    assert err.value.status == 409 and err.value.message.endswith(
        "backfill the gallery with generation 2, fit a query adapter (bctflow upgrade --generation 2 --route "
        "adapter), or query with generation 0's model"
    ), err.value.message
    key = manager.key()
    fit_route(p, ws, generation=2, role="adapter", parent=1)
    assert manager.key() != key  # the watch notices a new bridge
    manager.reload()
    v = manager.current
    assert sorted(v.adapters) == [1, 2] and v.adapters[2].generations == [2, 1, 0]
    answers = answer_vectors(v, [check_vector_query(v, q.tolist(), 2, 10) for q in queries])
    with ws.lineage(p, readonly=True) as store:
        links = store.bridge_chain(2, 0, "adapter")
    chain = BridgeChain(tuple(Bridge.load(Path(b.path), sha256=b.sha256) for b in links))
    carried = chain.map_queries(queries)
    np.testing.assert_allclose(carried, chain.map_gallery(g2).emb[:5], atol=1e-5)  # what the route was measured on
    _, ids = v.index.search(carried, 10, query_generation=0)
    for a, row in zip(answers, ids):
        assert a["ids"] == row[row >= 0].tolist() and set(a["generations"]) == {0}
        assert a["query_generation"] == 2 and a["query_route"]["generations"] == [2, 1, 0]
        assert [m["sha256"] for m in a["query_route"]["maps"]] == [b.sha256 for b in links]
    assert len(set(ids[:, 0])) > 1 and v.describe()["gallery_generation"] == 0
    path = Path(links[0].path)
    kept = path.read_bytes()
    path.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))  # one bit of g2 → g1's map flipped
    try:
        with pytest.raises(IndexIntegrityError) as err:
            load_version(ws, p, device="cpu", merge="none")
    finally:
        path.write_bytes(kept)
    assert str(err.value).startswith(f"bridge {path} is not the file the lineage recorded")
    assert "\n" not in str(err.value)
    # the free g2 promoted: image queries are embedded by g2's model and carried through its chain
    promote(p, ws, 2, force=True, by="test", reason="a free model served through its query adapters")
    manager.reload()
    v = manager.current
    assert v.query_generation == 2 and v.facts.compatible == (0,)
    png = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (8, 8), dtype=np.uint8)).save(png, format="PNG")
    (hit,) = search_images(v, embed_images(v, [ImageQuery(png.getvalue(), 5)], "none", 10**6))
    with torch.inference_mode():
        image = torch.from_numpy(decode_query(png.getvalue(), v, 10**6)[None])
        own = v.embedders[2](image).numpy().astype(np.float64)
    _, want = v.index.search(chain.map_queries(own), 5, query_generation=0)
    assert hit["ids"] == want[0].tolist() and hit["query_route"]["generations"] == [2, 1, 0]
    manager.loader.shutdown()


def test_a_chain_of_adapters_carries_g2s_queries_to_g0s_gallery_and_a_transform_maps_g1s_vectors_into_g2(three):
    home, params = three
    p, ws = load_params(params), Workspace(home)
    if not _bridges(home, params):
        fit_route(p, ws, generation=1, role="adapter")
    first = fit_route(p, ws, generation=2, role="adapter", parent=1)  # g2's parent is g0 (the gallery's): --from 1
    t = fit_route(p, ws, generation=2, role="transform", parent=1)
    assert (t.source, t.target, t.version) == (1, 2, 1)
    g0, g1, g2 = (_labelled(home, g) for g in (0, 1, 2))
    assert t.served["map"] > gallery_metrics(g2, g1)["map"]  # g2's queries on g1's vectors carried into g2
    with ws.lineage(p, readonly=True) as store:
        links = store.bridge_chain(2, 0, "adapter")
    chain = BridgeChain(tuple(Bridge.load(Path(b.path), sha256=b.sha256) for b in links))
    assert chain.generations == [2, 1, 0]
    through = gallery_metrics(chain.map_gallery(g2), g0)["map"]
    assert through > gallery_metrics(g2, g0)["map"]  # a query from g2 reaches g0's gallery through g1
    again = fit_route(p, ws, generation=2, role="adapter", parent=1)  # fitted again: the next version, beside
    assert again.version == first.version + 1 and Path(again.path).name == f"procrustes-v{again.version}.npz"


def test_route_auto_measures_all_four_routes_and_takes_the_cheapest_reaching_the_bar(three):
    """``bctflow upgrade --route auto`` (flows/upgrade/choose.py): both bridges fitted and recorded, the four
    routes measured on the labelled split, the rule applied with the user's bar, the line tagged on g1's run."""
    from flows.upgrade.choose import choose_upgrade

    home, params = three
    ws = Workspace(home)
    g0, g1 = _labelled(home, 0), _labelled(home, 1)
    full, cross = gallery_metrics(g1, g1)["map"], gallery_metrics(g1, g0)["map"]
    for bar in (0.0, full):
        p = apply_overrides(load_params(params), [f"upgrade.min_map={bar}"])
        c = choose_upgrade(p, ws, generation=1)
        e = {x.route: x for x in c.choice.evidence}
        assert e["compatible"].served_map == pytest.approx(cross) and e["backfill"].served_map == pytest.approx(full)
        assert e["adapter"].served_map == c.adapter.served["map"]
        assert e["transform"].served_map == c.transform.served["map"]
        assert e["backfill"].seconds_per_item == pytest.approx(1 / c.forward_items_per_s) and c.forward_items_per_s > 0
        assert 0 < e["transform"].seconds_per_item < e["backfill"].seconds_per_item  # a matrix product, not a forward
        chosen = e[c.choice.route]
        assert c.choice.met_bar and chosen.served_map >= bar
        cost = chosen.gallery_s(c.adapter.gallery_items)
        assert all(x.gallery_s(c.adapter.gallery_items) >= cost for x in e.values() if x.served_map >= bar)
    assert c.choice.route in ("transform", "backfill")  # at the backfill's own quality no free route reaches it
    with ws.lineage(p, readonly=True) as store:
        run_id = store.generation(1).mlflow_run_id
    run = ws.tracking(p, readonly=True).client().get_run(run_id)
    assert run.data.tags["bctflow.upgrade.route"] == c.choice.route
    assert run.data.tags["bctflow.upgrade.route_line"] == c.choice.line
    with ws.lineage(p, readonly=True) as store:
        rows = [r for r in store.route_choices() if r.generation_id == 1]
    assert [(r.from_generation_id, r.rule, r.min_map) for r in rows] == [(0, "auto", 0.0), (0, "auto", full)]
    assert (rows[-1].route, rows[-1].met_bar, rows[-1].line) == (c.choice.route, True, c.choice.line)
    assert [e["route"] for e in rows[-1].evidence] == ["compatible", "adapter", "transform", "backfill"]
    assert rows[-1].evidence[1]["served_map"] == c.adapter.served["map"]


def test_a_paired_sample_drawn_from_the_test_split_is_refused_before_any_embedding(three, monkeypatch):
    """A dataset whose "training" split holds the labelled test split's items (here: the test split given as both):
    the pairs would be the very items the route is measured on — one line before they are embedded, nothing
    recorded."""
    home, params = three
    p, ws = load_params(params), Workspace(home)
    real = bridge_fit.load_splits
    monkeypatch.setattr(bridge_fit, "load_splits", lambda *a: dataclasses.replace(s := real(*a), train=s.test))
    before = _bridges(home, params)
    with pytest.raises(ConfigError) as err:
        fit_route(p, ws, generation=1, role="adapter")
    assert re.fullmatch(
        r"\d+ of the \d+ paired items are in the labelled test split that measures the route \(ids \d+, \d+, \d+, …\); "
        r"pairs come from the training split only — give the dataset's train and test splits disjoint items and ids",
        str(err.value),
    ), str(err.value)
    assert _bridges(home, params) == before
    bridge_fit.check_pairs(np.arange(10), np.arange(10, 20))  # disjoint: accepted


def test_refusals_are_one_line_before_any_work_and_record_nothing(three, tmp_path):
    home, params = three
    p, ws = load_params(params), Workspace(home)
    before = _bridges(home, params)
    cases = [
        (dict(generation=0, role="adapter"), ConfigError, "generation 0 has no parent to bridge to; pass --from"),
        (dict(generation=1, role="adapter", parent=2), ConfigError, "--from 2 is not earlier than generation 1"),
        (dict(generation=1, role="query"), ConfigError, "--route 'query' is not a bridge's route; use one of"),
        (dict(generation=7, role="adapter"), LineageError, "generation 7 is not in the lineage"),
    ]
    for kw, kind, words in cases:
        with pytest.raises(kind) as err:
            fit_route(p, ws, **kw)
        assert str(err.value).startswith(words) and "\n" not in str(err.value)
    bad = apply_overrides(p, ["upgrade.map=low_rank", "upgrade.map_options={rank: 4, width: 9}"])
    with pytest.raises(ConfigError) as err:
        fit_route(bad, ws, generation=1, role="adapter")
    assert str(err.value) == (
        "the low_rank map has no option 'width' (its options: rank, ridge, iterations); fix upgrade.map_options"
    )
    with sqlite3.connect(home / "lineage.db") as db:  # the lineage says g0 was a Euclidean model
        db.execute("UPDATE generations SET geometry = 'euclidean' WHERE id = 0")
    try:
        with pytest.raises(ConfigError) as err:
            fit_route(p, ws, generation=1, role="adapter")
    finally:
        with sqlite3.connect(home / "lineage.db") as db:
            db.execute("UPDATE generations SET geometry = 'lorentz' WHERE id = 0")
    assert str(err.value).startswith("generation 1 is lorentz and generation 0 euclidean; a bridge maps within one")
    with Workspace(home).lineage(p, readonly=True) as store:
        ckpt = Path(store.generation(0).checkpoint_path)
    kept = ckpt.read_bytes()
    ckpt.write_bytes(kept + b"\0")
    try:
        with pytest.raises(CheckpointMismatchError) as err:
            fit_route(p, ws, generation=1, role="adapter")
    finally:
        ckpt.write_bytes(kept)
    assert str(err.value) == (
        f"generation 0's checkpoint {ckpt} is not the file the lineage recorded (sha256 differs); restore it from a "
        "backup"
    )
    ckpt.rename(ckpt.with_suffix(".away"))
    try:
        with pytest.raises(CheckpointMismatchError) as err:
            fit_route(p, ws, generation=1, role="adapter")
    finally:
        ckpt.with_suffix(".away").rename(ckpt)
    assert str(err.value) == (
        f"generation 0's checkpoint {ckpt} is missing; restore it from a backup (a bridge needs both models)"
    )
    assert _bridges(home, params) == before


def test_the_command_prints_one_line_and_refuses_in_one(three):
    """`bctflow upgrade`, the real CLI in this process (as child processes, each importing torch, MLflow and the
    project, the two commands took ~45 s of one CI worker)."""
    home, params = three

    def upgrade(*args: str) -> Result:
        cmd = ["upgrade", "--home", str(home), "--params", str(params), *args]
        return CliRunner().invoke(app, cmd, env={"COLUMNS": "400"})

    done = upgrade("--generation", "1", "--set", "upgrade.min_map=0.0")  # upgrade.route auto by default
    assert done.exit_code == 0, done.output[-3000:]
    text = " ".join(done.stdout.split())  # the bar, each bridge's line, then the choice's (a free route reaches 0)
    assert re.fullmatch(r"bar: upgrade\.min_map 0\.0000 adapter bridge g1→g0 v\d+ \(procrustes, .* µs per query; "
                        r".* s transform bridge g0→g1 v\d+ .* µs per query; .* s upgrade route (compatible|adapter): "
                        r"the cheapest route reaching upgrade\.min_map 0\.0000 for \d+ items \(compatible mAP .*\)",
                        text), text  # fmt: skip
    out = upgrade("--generation", "0", "--route", "adapter")
    assert out.exit_code == 2 and isinstance(out.exception, SystemExit), out.output[-3000:]
    assert "generation 0 has no parent to bridge to" in out.output


def test_no_worse_than_now_is_the_live_gallerys_served_map_as_the_lineage_records_it(tmp_path):
    """``upgrade.min_map: null``: route auto's bar is the live gallery's served mAP (flows/upgrade/choose.py),
    followed through a real lineage: g0's own gallery; a compatible g1 promoted queries it (its cross mAP); a full
    backfill to g1 measured what it published; an incompatible g2 forced into production changes nothing (its
    queries are carried through adapters, the lineage holds no mAP of them there). An explicit bar is taken as is."""
    from datetime import UTC, datetime

    from flows.upgrade.choose import route_bar, served_now
    from registry.lineage import LineageDB
    from registry.records import BackfillRecord, EvaluationRecord, GenerationBundle, PointerRecord

    with LineageDB(f"sqlite:///{tmp_path / 'lineage.db'}") as store:
        assert served_now(store) is None  # no live gallery yet
        g0 = generation_record(0, None, promoted=True)
        store.commit_generation(GenerationBundle(
            g0, evaluations=[EvaluationRecord(0, 0, "map", 0.5)], promotion=(None, "generation 0"),
            pointer=PointerRecord(0, "/i/0", "g0", compatible_generations=[0]),
        ))  # fmt: skip
        assert served_now(store) == (0.5, "g0 on its own gallery")
        bar = route_bar(store, None)
        assert bar.value == 0.5 and bar.words == "the bar 0.5000 (no worse than now)"
        assert bar.line == "bar: no worse than now (served mAP 0.5000 of the live gallery, g0 on its own gallery)"
        g1 = generation_record(1, 0, alignment="hbct")
        store.commit_generation(GenerationBundle(
            g1, evaluations=[EvaluationRecord(1, 0, "map", 0.6), EvaluationRecord(1, 1, "map", 0.7)],
            pointer=PointerRecord(0, "/i/0", "g1 compatible", compatible_generations=[0, 1]),
        ))  # fmt: skip
        assert served_now(store) == (0.5, "g0 on its own gallery")  # g1 may query it, g0 still does
        store.record_promotion(1, forced=False, by="test", reason="compatible")
        assert served_now(store) == (0.6, "g1's queries on g0's gallery")
        event = BackfillRecord(0, 1, "full", 1.0, "all", 539, 539, "/live/v1/index", False, {"map": 0.71},
                               datetime.now(UTC), 1.0)  # fmt: skip
        store.record_backfill(event, PointerRecord(1, "/live/v1/index", "full", compatible_generations=[1]), [0],
                              promote=True)  # fmt: skip
        assert served_now(store) == (0.71, "g1's queries after the full backfill g0→g1")
        g2 = generation_record(2, 1)
        store.commit_generation(GenerationBundle(g2, evaluations=[EvaluationRecord(2, 1, "map", 0.2)]))
        store.record_promotion(2, forced=True, by="test", reason="a free model served through adapters")
        assert served_now(store) == (0.71, "g1's queries after the full backfill g0→g1")
        explicit = route_bar(store, 0.65)
        assert (explicit.value, explicit.line, explicit.words) == (0.65, "bar: upgrade.min_map 0.6500", None)


def test_route_auto_without_a_bar_and_without_a_recorded_served_map_is_refused_in_one_line(tmp_path):
    """A lineage whose live gallery has no recorded mAP (hand-made: a backfill that measured none, its target's own
    evaluation missing): route auto has nothing to be no worse than — one line naming the fix; a route the user set
    goes on without a bar, and an explicit bar is taken."""
    from flows.upgrade.choose import route_bar

    with lineage_story(tmp_path / "lineage.db") as store:
        with pytest.raises(ConfigError) as err:
            route_bar(store, None)
        assert str(err.value) == (
            "upgrade.route auto with upgrade.min_map null takes the live gallery's served mAP as its bar, and the "
            "lineage records none (no live gallery, or no mAP of it); set upgrade.min_map"
        )
        assert route_bar(store, None, "backfill").value is None
        assert route_bar(store, 0.6).value == 0.6


def test_the_command_with_the_shipped_params_takes_no_worse_than_now_and_enough_pairs(three, tmp_path):
    """`bctflow upgrade --generation 1` with the upgrade section params.yaml ships (route auto, min_map null,
    paired_fraction 0.01): the bar is the live gallery's served mAP today (g0 on its own gallery, as the lineage
    records it), each bridge is fitted on two pairs per dimension of the 16-wide map (1 % of the gallery is fewer),
    both printed; the lineage records the bar the choice was made against."""
    home, _ = three
    params = tmp_path / "params.yaml"
    p = write_params(params)  # the repository's params.yaml, only the tiny model and data settings changed
    assert p.upgrade == load_params(REPO / "params.yaml").upgrade
    assert (p.upgrade.route, p.upgrade.min_map, p.upgrade.paired_fraction) == ("auto", None, 0.01)
    done = CliRunner().invoke(
        app, ["upgrade", "--home", str(home), "--params", str(params), "--generation", "1"], env={"COLUMNS": "400"}
    )
    assert done.exit_code == 0, done.output[-3000:]
    ws = Workspace(home)
    with ws.lineage(p, readonly=True) as store:
        now = store.metric_value(0, 0, "map")
        choice = [r for r in store.route_choices() if r.generation_id == 1][-1]
        samples = [b.sample for b in store.bridges()[-2:]]
    g0 = _labelled(home, 0)
    assert now == pytest.approx(gallery_metrics(g0, g0)["map"])
    text = " ".join(done.stdout.split())
    assert text.startswith(f"bar: no worse than now (served mAP {now:.4f} of the live gallery, g0 on its own gallery) ")
    why = f"32 paired items: 2 per dimension of the 16-wide map — upgrade.paired_fraction 0.01 of the {len(g0):,}-item "
    why += f"live gallery would be {math.ceil(0.01 * len(g0))}; held-out error"
    assert text.count(why) == 2 and samples == [32, 32], text  # the adapter g1→g0 and the transform g0→g1
    assert re.search(rf"upgrade route \w+: (the cheapest route reaching|no route reaches) the bar {now:.4f} \(no worse "
                     r"than now\)", text), text  # fmt: skip
    assert (choice.rule, choice.min_map, choice.line) == ("auto", now, text[text.index("upgrade route ") :])
