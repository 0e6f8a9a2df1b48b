"""Backfill steps (flows/backfill/make.py, flows/backfill/reembedding.py): planning writes nothing and refuses bad
requests; ``start`` saves the plan
or resumes the same request and refuses another, and fixes each gallery's items once; ``reembed`` never recomputes a
part that is on disk; a live gallery written before part stores (``gallery.npz`` + ``stamps.npy``, a CURRENT without
``serving_index``) is repaired by ``doctor --repair`` and backfilled the same way."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bctflow.cli import app
from components.errors import ConfigError, LineageError
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.live import LivePointer
from components.indexing.mixed import item_uncertainty
from components.indexing.parts import GalleryParts, PartWriter, StoredPart
from components.indexing.version import SERVING_FILE, GalleryVersion
from flows.backfill.make import finished_backfill, plan_backfill, start
from flows.backfill.plan import BackfillPlan
from flows.backfill.reembedding import reembed, select_items
from flows.gallery.data import load_splits
from flows.params import Params, apply_overrides, load_params
from flows.recovery.reconcile import inspect_workspace
from flows.runtime.workspace import Workspace
from registry.records import BackfillRecord, PointerRecord
from tests.helpers import copy_workspace, run_backfill, run_generation, write_params

N_GALLERY = 539  # the digits test split


@pytest.fixture(scope="module")
def lineage(g0_template, tmp_path_factory) -> tuple[Params, Workspace]:
    """g0 (classes 0–4, live, production) and g1, an independent model the live gallery does not accept.

    g1 trains from another seed, so its queries live in an unrelated embedding space: their retrieval on g0's
    gallery is at chance, below g0's own. Tests that write under backfills/ clean up (see ``work``).
    """
    home, params_file = copy_workspace(g0_template, tmp_path_factory.mktemp("reembed"))
    g1 = run_generation(home, params_file, {"name": "g1", "alignment": "independent"}, ["train.seed=1"])
    assert g1["compatible_with_live_gallery"] is False, f"precondition: g1 must be incompatible ({g1['cross']})"
    params = load_params(params_file)
    ws = Workspace(home)
    with ws.lineage(params, readonly=True) as store:
        ptr = store.live_pointer()
        assert (ptr.generation_id, ptr.compatible_generations) == (0, [0])
        assert store.generation(1).compatible_with_live is False and store.production_generation_id() == 0
    return params, ws


@pytest.fixture
def work(lineage):
    """The module workspace for a test that starts a backfill: its work folder is removed afterwards."""
    yield lineage
    shutil.rmtree(lineage[1].backfills_dir, ignore_errors=True)


def _files(home: Path) -> dict[str, int]:
    return {str(p.relative_to(home)): p.stat().st_mtime_ns for p in home.rglob("*") if p.is_file()}


def _live_gallery(ws: Workspace) -> GalleryEmbeddings:
    return GalleryParts(GalleryVersion(ws.generation_dir(0)).evaluation_gallery()).embeddings()


def test_planning_writes_nothing(lineage):
    params, ws = lineage
    before = _files(ws.home)
    full = plan_backfill(params, ws)
    partial = plan_backfill(params, ws, target=0, fraction=0.25, order="random", seed=3)
    assert _files(ws.home) == before and not ws.backfills_dir.exists()

    # full: the production generation by default, every item, ζ restarts from ζ₀
    assert (full.target, full.kind, full.order, full.source_generation) == (0, "full", "all", 0)
    assert [(g.name, g.total, g.selected) for g in full.galleries] == [("evaluation", N_GALLERY, N_GALLERY)]
    assert not full.forced and full.restart_zeta and full.zeta == params.geometry.zeta0
    assert Path(full.source_index) == ws.generation_dir(0) / "index"
    assert full.n_parts == (N_GALLERY + params.backfill.chunk_size - 1) // params.backfill.chunk_size
    # partial: a share of the gallery; which items, start fixes (seeded)
    assert (partial.kind, partial.order, partial.fraction) == ("partial", "random", 0.25)
    assert partial.evaluation.selected == round(0.25 * N_GALLERY) and not partial.restart_zeta


def test_start_fixes_each_gallerys_items_once_deterministic_in_the_seed(work):
    params, ws = work
    plan = start(plan_backfill(params, ws, target=0, fraction=0.25, order="random", seed=3))
    chosen = select_items(plan, plan.evaluation)
    saved = plan.work_dir / "selection" / "evaluation.npy"
    assert np.array_equal(np.load(saved), chosen) and np.all(np.diff(chosen) > 0)  # sorted: read front to back
    assert len(chosen) == round(0.25 * N_GALLERY) and set(chosen.tolist()) <= set(range(N_GALLERY))
    assert np.array_equal(select_items(plan, plan.evaluation), chosen)  # read back, not chosen again
    shutil.rmtree(ws.backfills_dir)
    again = select_items(
        start(plan_backfill(params, ws, target=0, fraction=0.25, order="random", seed=3)), plan.evaluation
    )
    assert np.array_equal(again, chosen)
    shutil.rmtree(ws.backfills_dir)
    other = start(plan_backfill(params, ws, target=0, fraction=0.25, order="random", seed=4))
    assert not np.array_equal(select_items(other, other.evaluation), chosen)
    shutil.rmtree(ws.backfills_dir)
    full = start(plan_backfill(params, ws))
    assert np.array_equal(select_items(full, full.evaluation), np.arange(N_GALLERY))


def test_a_partial_backfill_re_embeds_the_most_uncertain_items_first(work):
    params, ws = work
    plan = start(plan_backfill(params, ws, target=0, fraction=0.2, order="uncertainty"))
    u = item_uncertainty(_live_gallery(ws))
    chosen = np.zeros(N_GALLERY, dtype=bool)
    chosen[select_items(plan, plan.evaluation)] = True
    assert chosen.sum() == round(0.2 * N_GALLERY)
    assert u[chosen].min() >= u[~chosen].max()


@pytest.mark.parametrize(
    ("request_", "error", "words"),
    [
        ({"fraction": 0.0}, ConfigError, "--fraction must be in (0, 1] (got 0.0)"),
        ({"fraction": -0.5}, ConfigError, "--fraction must be in (0, 1] (got -0.5)"),
        ({"fraction": 1.5}, ConfigError, "--fraction must be in (0, 1] (got 1.5)"),
        ({"order": "newest"}, ConfigError, "unknown backfill order 'newest'; use one of uncertainty, random, oldest"),
        ({"target": 7}, LineageError, "generation 7 is not in the lineage"),
        ({"target": 1, "fraction": 0.5}, ConfigError, "generation 1's queries are not compatible with it"),
        ({"target": 1, "fraction": 0.5, "order": "oldest"}, ConfigError, "or --force to mix anyway"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_written(lineage, request_: dict, error, words: str):
    params, ws = lineage
    before = _files(ws.home)
    with pytest.raises(error) as info:
        plan_backfill(params, ws, **request_)
    assert words in str(info.value)
    assert _files(ws.home) == before


def test_a_fraction_that_selects_no_item_is_refused(lineage):
    params, ws = lineage
    assert round(0.0005 * N_GALLERY) == 0
    with pytest.raises(ConfigError, match="fraction"):
        plan_backfill(params, ws, target=0, fraction=0.0005, order="random")


def test_uncertainty_order_over_a_gallery_without_hyperbolic_uncertainty_is_refused(lineage, tmp_path: Path):
    params, ws = lineage
    copy = Workspace(tmp_path / "ws")
    shutil.copytree(ws.home, copy.home)
    store = GalleryVersion(copy.generation_dir(0)).evaluation_store
    cosine = dataclasses.replace(GalleryParts(store).embeddings(), geometry="euclidean")
    shutil.rmtree(store)
    writer = PartWriter(store, chunk_size=256)
    writer.add(StoredPart(cosine, np.zeros(len(cosine), np.int64)))
    writer.finish()
    with pytest.raises(ConfigError, match="uncertainty ordering needs Lorentz embeddings .*use --order random or"):
        plan_backfill(params, copy, target=0, fraction=0.5, order="uncertainty")
    assert plan_backfill(params, copy, target=0, fraction=0.5, order="random").evaluation.selected == 270


def test_force_mixes_a_generation_the_live_gallery_does_not_accept(lineage):
    params, ws = lineage
    forced = plan_backfill(params, ws, target=1, fraction=0.5, order="random", force=True)
    assert forced.kind == "partial" and forced.forced and forced.target == 1
    assert forced.evaluation.selected == round(0.5 * N_GALLERY)
    full = plan_backfill(params, ws, target=1, force=True)  # a full backfill replaces the gallery: nothing to override
    assert full.kind == "full" and not full.forced


def test_a_retired_generation_is_refused(lineage, tmp_path: Path):
    params, ws = lineage
    copy = Workspace(tmp_path / "ws")
    shutil.copytree(ws.home, copy.home)
    store = copy.lineage(params)
    event = BackfillRecord(0, 1, "full", 1.0, "all", N_GALLERY, N_GALLERY, "/v1/index", False, {}, datetime.now(UTC), 1)
    store.record_backfill(event, PointerRecord(1, "/v1/index", "full backfill", None, None, [1]), retire=[0])
    store.close()
    with pytest.raises(ConfigError, match="generation 0 is retired; backfill with a serving generation"):
        plan_backfill(params, copy, target=0)


def test_start_saves_the_plan_and_resumes_the_same_request(work):
    params, ws = work
    first = start(plan_backfill(params, ws, target=0, fraction=0.3, order="random", seed=1))
    saved = first.work_dir / "plan.json"
    assert first.work_dir == ws.backfills_dir / "in_progress"
    assert BackfillPlan.model_validate_json(saved.read_text()) == first

    later = plan_backfill(params, ws, target=0, fraction=0.3, order="random", seed=1)
    assert later.started_at != first.started_at
    resumed = start(later)
    assert resumed == first and resumed.started_at == first.started_at  # the unfinished backfill, not a new one

    text = saved.read_text()
    for other in (
        plan_backfill(params, ws, target=0, fraction=0.3, order="random", seed=2),
        plan_backfill(params, ws, target=0),
        plan_backfill(params, ws, target=1, fraction=0.3, order="random", seed=1, force=True),
    ):
        with pytest.raises(LineageError) as info:
            start(other)
        msg = str(info.value)
        assert "another backfill (generation 0, partial, fraction 0.3, order random) is unfinished" in msg
        assert "rerun that command to finish it, or delete the folder to abandon it" in msg
    assert saved.read_text() == text


def test_an_unfinished_backfill_copied_with_its_workspace_resumes_in_the_copy(work, tmp_path: Path):
    params, ws = work
    first = start(plan_backfill(params, ws, target=0, fraction=0.3, order="random", seed=1))
    copy = Workspace(tmp_path / "copy")
    shutil.copytree(ws.home, copy.home)
    resumed = start(plan_backfill(params, copy, target=0, fraction=0.3, order="random", seed=1))
    assert resumed.started_at == first.started_at  # the same backfill
    assert np.array_equal(select_items(resumed, resumed.evaluation), select_items(first, first.evaluation))
    assert resumed.work_dir == copy.backfills_dir / "in_progress"  # written in the copy, not the original
    assert Path(resumed.source_index).is_relative_to(copy.home) and Path(resumed.target_checkpoint).is_relative_to(
        copy.home
    )


def test_an_unfinished_backfill_of_an_older_bctflow_is_refused_with_its_fix(work):
    params, ws = work
    plan = plan_backfill(params, ws, target=0)
    plan.work_dir.mkdir(parents=True)
    (plan.work_dir / "plan.json").write_text('{"home": "x", "positions": [1, 2]}')
    with pytest.raises(LineageError, match="written by another bctflow version; delete .*in_progress and start"):
        start(plan)


class _Killed(Exception):
    pass


def test_reembed_resumes_from_the_parts_on_disk(work):
    params, ws = work
    small = apply_overrides(params, {"backfill.chunk_size": 100, "train.eval_batch_size": 100})
    plan = start(plan_backfill(small, ws, target=0))
    assert plan.n_parts == 6
    parts = plan.work_version.evaluation_store / "parts"
    seen: list[int] = []

    def kill_after_third(n: int) -> None:
        seen.append(n)
        if len(seen) == 3:
            raise _Killed  # the process dies right after the third part was written

    with pytest.raises(_Killed):
        reembed(plan, kill_after_third)
    on_disk = {p.name: p.stat().st_mtime_ns for p in parts.glob("part-*.npz")}
    assert sorted(on_disk) == ["part-00000.npz", "part-00001.npz", "part-00002.npz"]

    (gallery, done), *_ = reembed(plan)
    assert gallery.name == "evaluation" and (done.items, done.parts_resumed, done.parts) == (N_GALLERY - 300, 3, 6)
    assert {n: t for n, t in ((p.name, p.stat().st_mtime_ns) for p in parts.glob("part-*.npz")) if n in on_disk} == (
        on_disk
    )  # not recomputed
    (_, again), *_ = reembed(plan)
    assert (again.items, again.parts_resumed, again.parts) == (0, 6, 6)

    # the parts hold the split's items in order, embedded by the target (ζ restarts at ζ₀ = g0's ζ: g0's vectors)
    test = load_splits(small, ws).test
    store = done.store
    assert np.array_equal(store.column("ids"), test.ids) and np.array_equal(store.column("labels"), test.labels)
    assert (store.column("stamps") == 0).all()
    np.testing.assert_allclose(store.embeddings().emb, _live_gallery(ws).emb, atol=1e-5)


def _make_legacy(ws: Workspace) -> np.ndarray:
    """Turn generation 0's folder and CURRENT into what bctflow wrote before part stores and ``serving_index``:
    ``gallery.npz`` with ``stamps.npy`` (a tenth of the items stamped 0, the rest 1, as after a partial backfill),
    no ``serving.json``, and pointer rows without lineage revision 0007's columns (that bctflow recorded no rows per
    generation). Returns the items stamped 0, the oldest."""
    version = GalleryVersion(ws.generation_dir(0))
    gallery = GalleryParts(version.evaluation_store).embeddings()
    gallery.save(version.root / "gallery.npz")
    shutil.rmtree(version.evaluation_store)
    (version.root / SERVING_FILE).unlink()
    stamps = np.ones(len(gallery), dtype=np.int64)
    oldest = np.random.default_rng(7).choice(len(gallery), size=round(0.1 * len(gallery)), replace=False)
    stamps[oldest] = 0
    np.save(version.root / "stamps.npy", stamps)
    live = LivePointer(ws.live_dir)
    live.restore({k: v for k, v in live.pointer().items() if k != "serving_index"})
    with sqlite3.connect(ws.home / "lineage.db") as db:
        columns = ("store", "collection", "rows_by_generation", "index_params")
        db.execute(f"UPDATE gallery_pointers SET {', '.join(f'{c} = NULL' for c in columns)}")
    return np.sort(oldest)


def test_a_workspace_written_before_part_stores_is_repaired_and_backfilled(lineage, tmp_path: Path):
    params, ws = lineage
    old = Workspace(tmp_path / "old")
    shutil.copytree(ws.home, old.home)
    oldest = _make_legacy(old)
    live = LivePointer(old.live_dir)
    assert live.index().ntotal == N_GALLERY  # an old CURRENT still serves (through the version's folders)
    found = inspect_workspace(old, params)
    moved = (  # a copy: doctor reports its MLflow URIs, only --repair (or a command that writes) rewrites them
        f"the MLflow store's artifact URIs point under {(ws.home / 'mlartifacts').resolve().as_uri()}, not under this "
        "workspace (it was copied or moved)"
    )
    assert [f.what for f in found] == ["live/CURRENT does not match the lineage's live pointer", moved]
    inspect_workspace(old, params, repair=True)
    assert live.pointer()["serving_index"] == str((old.generation_dir(0) / "index").resolve())
    assert inspect_workspace(old, params) == []

    plan = start(plan_backfill(params, old, target=1, fraction=0.1, order="oldest", force=True))
    assert np.array_equal(select_items(plan, plan.evaluation), oldest)  # stamps.npy read as the stamps
    shutil.rmtree(old.backfills_dir)
    params_file = tmp_path / "params.yaml"
    write_params(params_file)
    before = GalleryParts(old.generation_dir(0) / "gallery.npz").embeddings()
    done = run_backfill(old.home, params_file, target=1, fraction=0.1, order="oldest", force=True)
    version = GalleryVersion.of_index(done["index"])
    mixed = GalleryParts(version.evaluation_gallery())
    assert not mixed.legacy and len(mixed) == N_GALLERY and (mixed.column("stamps") == 1).all()
    z, g1 = mixed.embeddings().z, GalleryParts(GalleryVersion(old.generation_dir(1)).evaluation_gallery()).embeddings()
    np.testing.assert_allclose(z[oldest], g1.z[oldest], atol=1e-5)  # the oldest items, re-embedded by g1
    rest = np.setdiff1d(np.arange(N_GALLERY), oldest)
    assert np.array_equal(z[rest], before.z[rest])  # the others kept as they were
    assert live.serving_index() == version.evaluation_index.resolve() and inspect_workspace(old, params) == []


def _bytes(home: Path) -> dict[str, str]:
    """Every file of the workspace (lineage.db, mlflow.db, live/, backfills/ …) by its sha256."""
    return {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest() for p in home.rglob("*") if p.is_file()
    }


def test_a_finished_backfill_run_again_is_already_done_and_changes_no_byte(lineage, tmp_path: Path):
    params, ws = lineage
    copy = Workspace(tmp_path / "copy")
    subprocess.run(["cp", "-a", str(ws.home), str(copy.home)], check=True)
    params_file = ws.home.parent / "params.yaml"  # the fixture's
    done = run_backfill(copy.home, params_file, target=1)
    assert finished_backfill(plan_backfill(params, copy, target=1)) == done["event"] == 1
    # another request still has work to do: another generation, kind, or seed of a partial
    assert finished_backfill(plan_backfill(params, copy, target=1, fraction=0.5, order="random")) is None
    before = _bytes(copy.home)
    again = CliRunner().invoke(
        app, ["backfill", "--generation", "1", "--home", str(copy.home), "--params", str(params_file)]
    )
    assert again.exit_code == 0, again.output
    said = " ".join(again.output.split())
    assert (
        "backfill 1 (generation 1, full) is already done: the live gallery is the version it published; nothing to do"
        in said
    )
    assert _bytes(copy.home) == before  # the lineage, the MLflow registry, the live index: byte for byte
    with copy.lineage(params, readonly=True) as store:
        assert len(store.backfills()) == 1
