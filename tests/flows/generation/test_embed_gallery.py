"""Step 3 (flows/generation/embed_gallery.py): the evaluation gallery is the test split embedded in order into a part
store, bit for bit what embedding the whole split in one pass gives; only the generation's own model gets a FAISS
index, and generation 0 records which index serves; the clip fraction is a Lorentz diagnostic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from components.indexing.parts import GalleryParts
from components.indexing.stores.faiss import GalleryIndex
from components.indexing.version import SERVING_FILE, GalleryVersion
from components.models import build_model, load_model, save_model
from components.training import embed_split
from flows.gallery.data import load_splits
from flows.generation.embed_gallery import embed_and_index
from flows.generation.results import Trained
from flows.params import GenerationSpec, Params
from flows.planning import GenerationPlan, make_plan
from tests.helpers import tiny_spec, write_params

#: ζ small enough that an untrained tiny model clips part (not all) of the gallery
ZETA = 0.3


def _setup(tmp: Path, geometry: str) -> tuple[Params, str]:
    """Params for ``geometry`` and a matching (untrained, seeded) checkpoint of the tiny model."""
    params = write_params(tmp / "params.yaml", [f"model.geometry={geometry}", f"geometry.zeta0={ZETA}"])
    torch.manual_seed(0)
    ckpt = tmp / "model.pt"
    save_model(build_model(tiny_spec(geometry=geometry, zeta=ZETA if geometry == "lorentz" else None)), ckpt)
    return params, str(ckpt)


@pytest.fixture(scope="module")
def lorentz(tmp_path_factory) -> tuple[Params, str]:
    return _setup(tmp_path_factory.mktemp("gallery-lorentz"), "lorentz")


@pytest.fixture(scope="module")
def euclidean(tmp_path_factory) -> tuple[Params, str]:
    return _setup(tmp_path_factory.mktemp("gallery-euclidean"), "euclidean")


def _plan(params: Params, home: Path) -> GenerationPlan:
    return make_plan(params, home, GenerationSpec(name="g0"))


def _trained(role: str, ckpt: str, geometry: str) -> Trained:
    return Trained(role, ckpt, [], 0.0, "cpu", None, 1.0, 16, 17 if geometry == "lorentz" else 16)


def test_the_model_gallery_is_the_test_split_in_order_with_a_faiss_index(lorentz, tmp_path: Path):
    params, ckpt = lorentz
    plan = _plan(params, tmp_path / "ws")
    batches: list[int] = []
    gallery = embed_and_index(plan, _trained("model", ckpt, "lorentz"), on_batch=batches.append)

    test = load_splits(params, plan.workspace).test
    assert Path(gallery.path) == plan.staging_dir / "gallery" and gallery.role == "model"
    store = GalleryParts(Path(gallery.path))
    assert [len(p) for p in store.parts()] == [256, 256, 27]  # backfill.chunk_size items per part
    assert (store.column("stamps") == 0).all()
    gal = store.embeddings()
    assert np.array_equal(gal.ids, test.ids) and np.array_equal(gal.labels, test.labels)  # same items, same order
    assert gallery.count == len(gal) == len(test) and sum(batches) == len(test)
    assert gal.geometry == "lorentz" and gal.emb.shape == (len(test), 17)
    # bit for bit the embeddings of the whole split in batches of train.eval_batch_size
    whole, _, _ = embed_split(load_model(Path(ckpt)), test, batch_size=params.train.eval_batch_size)
    for name in ("z", "emb", "clipped", "logits"):
        assert np.array_equal(getattr(gal, name), getattr(whole, name)), name

    assert Path(gallery.index_dir) == plan.staging_dir / "index"
    index = GalleryIndex.load(Path(gallery.index_dir))
    assert index.ntotal == len(test) and index.manifest.generation == plan.gen_id == 0
    assert (index.manifest.geometry, index.dim) == ("lorentz", 17)
    _, found = index.search(gal.vectors()[:1].astype(np.float32), len(test), query_generation=0)
    assert sorted(found[0].tolist()) == sorted(test.ids.tolist())  # the index holds exactly the gallery's ids

    # the diagnostic is the share of clipped gallery embeddings, stored with them
    assert gallery.clip_fraction == pytest.approx(float(np.mean(gal.clipped)))
    assert 0.0 < gallery.clip_fraction < 1.0
    assert not plan.final_dir.exists()  # only staging is written
    # generation 0 (no corpus in params): the evaluation split's index serves, as recorded
    served = GalleryVersion(plan.staging_dir).serving()
    assert (served.source, served.index) == ("eval_split", plan.staging_dir / "index")


def test_a_killed_embedding_resumes_and_a_retrained_model_starts_over(lorentz, tmp_path: Path):
    params, ckpt = lorentz
    plan = _plan(params, tmp_path / "ws")
    first = embed_and_index(plan, _trained("model", ckpt, "lorentz"))
    store = Path(first.path)
    parts = sorted((store / "parts").glob("part-*.npz"))
    (store / "store.json").unlink()
    parts[-1].unlink()  # killed before its last part was written
    kept = {p.name: p.stat().st_mtime_ns for p in parts[:-1]}
    embed_and_index(plan, _trained("model", ckpt, "lorentz"))
    assert {p.name: p.stat().st_mtime_ns for p in parts[:-1]} == kept  # finished parts are not embedded again
    torch.manual_seed(1)
    other = tmp_path / "other.pt"
    save_model(build_model(tiny_spec(geometry="lorentz", zeta=ZETA)), other)
    again = embed_and_index(plan, _trained("model", str(other), "lorentz"))
    assert not any(p.stat().st_mtime_ns == kept.get(p.name) for p in (store / "parts").glob("part-*.npz"))
    whole, _, _ = embed_split(load_model(other), load_splits(params, plan.workspace).test, batch_size=512)
    assert np.array_equal(GalleryParts(Path(again.path)).embeddings().z, whole.z)  # the other model's, not a mix


def test_the_reference_gallery_gets_no_index(lorentz, tmp_path: Path):
    params, ckpt = lorentz
    plan = _plan(params, tmp_path / "ws")
    gallery = embed_and_index(plan, _trained("reference", ckpt, "lorentz"))
    assert Path(gallery.path) == plan.staging_dir / "reference" / "gallery" and gallery.role == "reference"
    assert gallery.index_dir is None
    assert sorted(p.name for p in (plan.staging_dir / "reference").iterdir()) == ["gallery"]
    assert not (plan.staging_dir / "reference" / SERVING_FILE).exists()
    gal = GalleryParts(Path(gallery.path)).embeddings()
    assert np.array_equal(gal.ids, load_splits(params, plan.workspace).test.ids)
    assert gallery.clip_fraction == pytest.approx(float(np.mean(gal.clipped)))


def test_a_euclidean_generation_has_no_clip_fraction(euclidean, tmp_path: Path):
    params, ckpt = euclidean
    plan = _plan(params, tmp_path / "ws")
    assert plan.geometry == "euclidean" and plan.zeta is None
    gallery = embed_and_index(plan, _trained("model", ckpt, "euclidean"))
    assert gallery.clip_fraction is None
    index = GalleryIndex.load(Path(gallery.index_dir))
    assert (index.manifest.geometry, index.dim, index.ntotal) == ("euclidean", 16, gallery.count)
    gal = GalleryParts(Path(gallery.path)).embeddings()
    assert np.array_equal(gal.ids, load_splits(params, plan.workspace).test.ids)
