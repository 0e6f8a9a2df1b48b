"""Step 3 (flows/steps/embed_gallery.py): the gallery is the test split embedded in order; only the generation's own
model gets a FAISS index; the clip fraction is a Lorentz diagnostic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from components.indexing import GalleryIndex
from components.indexing.gallery import GalleryEmbeddings
from components.models import build_model, save_model
from flows.data import load_splits
from flows.params import GenerationSpec, Params
from flows.planning import GenerationPlan, make_plan
from flows.steps.embed_gallery import build_gallery
from flows.steps.results import Trained
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
    gallery = build_gallery(plan, _trained("model", ckpt, "lorentz"), on_batch=batches.append)

    test = load_splits(params, plan.workspace).test
    assert Path(gallery.path) == plan.staging_dir / "gallery.npz" and gallery.role == "model"
    gal = GalleryEmbeddings.load(Path(gallery.path))
    assert np.array_equal(gal.ids, test.ids) and np.array_equal(gal.labels, test.labels)  # same items, same order
    assert gallery.count == len(gal) == len(test) and sum(batches) == len(test)
    assert gal.geometry == "lorentz" and gal.emb.shape == (len(test), 17)

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


def test_the_reference_gallery_gets_no_index(lorentz, tmp_path: Path):
    params, ckpt = lorentz
    plan = _plan(params, tmp_path / "ws")
    gallery = build_gallery(plan, _trained("reference", ckpt, "lorentz"))
    assert Path(gallery.path) == plan.staging_dir / "reference" / "gallery.npz" and gallery.role == "reference"
    assert gallery.index_dir is None
    assert sorted(p.name for p in plan.staging_dir.rglob("*")) == ["gallery.npz", "reference"]
    gal = GalleryEmbeddings.load(Path(gallery.path))
    assert np.array_equal(gal.ids, load_splits(params, plan.workspace).test.ids)
    assert gallery.clip_fraction == pytest.approx(float(np.mean(gal.clipped)))


def test_a_euclidean_generation_has_no_clip_fraction(euclidean, tmp_path: Path):
    params, ckpt = euclidean
    plan = _plan(params, tmp_path / "ws")
    assert plan.geometry == "euclidean" and plan.zeta is None
    gallery = build_gallery(plan, _trained("model", ckpt, "euclidean"))
    assert gallery.clip_fraction is None
    index = GalleryIndex.load(Path(gallery.index_dir))
    assert (index.manifest.geometry, index.dim, index.ntotal) == ("euclidean", 16, gallery.count)
    gal = GalleryEmbeddings.load(Path(gallery.path))
    assert np.array_equal(gal.ids, load_splits(params, plan.workspace).test.ids)
