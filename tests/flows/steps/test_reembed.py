"""Backfill steps (flows/steps/reembed.py): planning writes nothing and refuses bad requests; ``start`` saves the plan
or resumes the same request and refuses another; ``embed_chunks`` never recomputes a chunk that is on disk."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from components.errors import ConfigError, LineageError
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.mixed import item_uncertainty
from flows.data import load_splits
from flows.params import Params, apply_overrides, load_params
from flows.steps.reembed import BackfillPlan, embed_chunks, plan_backfill, start
from flows.workspace import Workspace
from registry.records import BackfillRecord, PointerRecord
from tests.helpers import run_generation, write_params

N_GALLERY = 539  # the digits test split


@pytest.fixture(scope="module")
def lineage(prefect_harness, tmp_path_factory) -> tuple[Params, Workspace]:
    """g0 (classes 0–4, live, production) and g1, an independent model the live gallery does not accept.

    g1 trains from another seed, so its queries live in an unrelated embedding space: their retrieval on g0's
    gallery is at chance, below g0's own. Tests that write under backfills/ clean up (see ``work``).
    """
    tmp = tmp_path_factory.mktemp("reembed")
    params_file = tmp / "params.yaml"
    write_params(params_file)
    home = tmp / "ws"
    run_generation(home, params_file, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
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
    return GalleryEmbeddings.load(ws.generation_dir(0) / "gallery.npz")


def test_planning_writes_nothing(lineage):
    params, ws = lineage
    before = _files(ws.home)
    full = plan_backfill(params, ws)
    partial = plan_backfill(params, ws, target=0, fraction=0.25, order="random", seed=3)
    assert _files(ws.home) == before and not ws.backfills_dir.exists()

    # full: the production generation by default, every item, ζ restarts from ζ₀
    assert (full.target, full.kind, full.order, full.source_generation) == (0, "full", "all", 0)
    assert full.positions == list(range(N_GALLERY)) and not full.forced
    assert full.restart_zeta and full.zeta == params.geometry.zeta0
    assert Path(full.source_gallery) == ws.generation_dir(0) / "gallery.npz"
    # partial: a seeded share of the gallery, deterministic in the seed
    assert (partial.kind, partial.order, partial.fraction) == ("partial", "random", 0.25)
    assert len(partial.positions) == round(0.25 * N_GALLERY) == len(set(partial.positions))
    assert set(partial.positions) <= set(range(N_GALLERY)) and not partial.restart_zeta
    again = plan_backfill(params, ws, target=0, fraction=0.25, order="random", seed=3)
    other = plan_backfill(params, ws, target=0, fraction=0.25, order="random", seed=4)
    assert again.positions == partial.positions and other.positions != partial.positions


def test_a_partial_backfill_re_embeds_the_most_uncertain_items_first(lineage):
    params, ws = lineage
    plan = plan_backfill(params, ws, target=0, fraction=0.2, order="uncertainty")
    u = item_uncertainty(_live_gallery(ws))
    chosen = np.zeros(N_GALLERY, dtype=bool)
    chosen[plan.positions] = True
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


def test_force_mixes_a_generation_the_live_gallery_does_not_accept(lineage):
    params, ws = lineage
    forced = plan_backfill(params, ws, target=1, fraction=0.5, order="random", force=True)
    assert forced.kind == "partial" and forced.forced and forced.target == 1
    assert len(forced.positions) == round(0.5 * N_GALLERY)
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
    assert resumed.positions == first.positions and resumed.started_at == first.started_at  # the same backfill
    assert resumed.work_dir == copy.backfills_dir / "in_progress"  # written in the copy, not the original
    assert Path(resumed.source_gallery).is_relative_to(copy.home) and Path(resumed.target_checkpoint).is_relative_to(
        copy.home
    )


class _Killed(Exception):
    pass


def test_embed_chunks_resumes_from_the_chunks_on_disk(work):
    params, ws = work
    small = apply_overrides(params, {"backfill.chunk_size": 100})
    plan = start(plan_backfill(small, ws, target=0))
    assert plan.n_chunks == 6

    def kill_after_third(i: int, n: int, resumed: bool) -> None:
        if i == 2:
            raise _Killed  # the process dies right after chunk 2 was written

    with pytest.raises(_Killed):
        embed_chunks(plan, kill_after_third)
    on_disk = {i: plan.chunk_path(i).stat().st_mtime_ns for i in range(3)}
    assert not plan.chunk_path(3).exists()

    calls: list[tuple[int, int, bool]] = []
    assert embed_chunks(plan, lambda i, n, resumed: calls.append((i, n, resumed))) == (3, 6)
    assert calls == [(0, 6, True), (1, 6, True), (2, 6, True), (3, 6, False), (4, 6, False), (5, 6, False)]
    assert {i: plan.chunk_path(i).stat().st_mtime_ns for i in range(3)} == on_disk  # not recomputed

    calls.clear()
    assert embed_chunks(plan, lambda i, n, resumed: calls.append((i, n, resumed))) == (6, 6)
    assert [resumed for _, _, resumed in calls] == [True] * 6

    # each chunk holds its items, embedded by the target (ζ restarts at ζ₀ = g0's ζ: the same vectors as g0's gallery)
    test = load_splits(small, ws).test
    live = _live_gallery(ws)
    for i in range(plan.n_chunks):
        part = GalleryEmbeddings.load(plan.chunk_path(i))
        pos = np.asarray(plan.positions[i * 100 : (i + 1) * 100])
        assert np.array_equal(part.ids, test.ids[pos]) and np.array_equal(part.labels, test.labels[pos])
        np.testing.assert_allclose(part.emb, live.emb[pos], atol=1e-5)
