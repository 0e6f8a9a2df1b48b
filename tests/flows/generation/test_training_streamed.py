"""Training from data on disk (flows/generation/training.py + components/data/sets/streamed.py): a generation trains
from
WebDataset shards and from a Parquet manifest of image files through the streaming layer, with the normalisation
statistics and the evaluation split of the same images held in memory; an aligned generation follows it; and the
numbers taken from a split (statistics, ζ, clip fraction) do not depend on where its images live."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from components.data.sources import write_manifest, write_webdataset
from components.data.sources.split import SourceDataset
from components.data.stats import normalization_stats
from components.models import build_model, load_model
from flows.gallery.data import load_splits
from flows.generation.evaluation import train_clip_fraction
from flows.params import GenerationSpec, load_params
from flows.planning import make_plan
from flows.planning.zeta import choose_zeta, parent_radii
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from tests.components.data.sources.source_files import save_png
from tests.helpers import run_generation, tiny_spec, write_params


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return load_splits(
        write_params(tmp_path_factory.mktemp("d") / "params.yaml"), Workspace(tmp_path_factory.mktemp("w"))
    )


def _write(kind: str, top: Path, splits) -> None:
    for name in ("train", "test"):
        ds = getattr(splits, name).decode()
        if kind == "webdataset":
            write_webdataset(top / name, [(ds.images, ds.labels, ds.ids)], shard_size=300, class_names=ds.class_names)
        else:
            paths = [save_png(top / "png" / name / f"{i}.png", img) for img, i in zip(ds.images, ds.ids)]
            write_manifest(top / f"{name}.parquet", paths, ids=ds.ids, labels=ds.labels)


@pytest.mark.parametrize("kind", ["webdataset", "manifest"])
def test_a_generation_trains_from_data_on_disk(kind, digits, tmp_path, prefect_harness):
    _write(kind, tmp_path / "data", digits)
    params = tmp_path / "params.yaml"
    write_params(
        params, [f"data.dataset={kind}", f"data.path={tmp_path / 'data'}", "data.image_size=8", "data.workers=1"]
    )
    home = tmp_path / "ws"
    p = load_params(params)
    splits = load_splits(p, Workspace(home))
    assert isinstance(splits.train, SourceDataset) and len(splits.train) == len(digits.train)
    np.testing.assert_array_equal(
        splits.test.decode().images, digits.test.decode().images
    )  # the evaluation split: same images

    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    if kind == "webdataset":  # ζ from data reads the parent's radii over training images through the stream too
        ruled = load_params(params, ["geometry.zeta_rule=percentile"])
        plan = make_plan(ruled, home, GenerationSpec(name="g1", classes="all"))
        radii = parent_radii(plan.parent.model(), load_splits(ruled, Workspace(home)).train, plan.gen_id)
        assert len(radii) == min(2000, len(digits.train)) and (radii > 0).all()
        assert f"over {len(radii)} training images" in plan.zeta_reason or "≥ P95" in plan.zeta_reason
    if kind == "webdataset":  # an aligned generation reads the parent's classes through the same stream
        run_generation(home, params, {"name": "g1", "classes": "all", "alignment": "hbct", "reference": False})
    doc = LineageDB(f"sqlite:///{home / 'lineage.db'}").to_json()
    assert [g["name"] for g in doc] == (["g0", "g1"] if kind == "webdataset" else ["g0"])
    g0 = doc[0]
    assert g0["dataset"] == kind and 0.0 < g0["metrics"]["self"]["map"] <= 1.0
    model = load_model(home / "generations" / "gen_000" / "model.pt")
    # the statistics of the streamed split are those of the same images in memory, to the last bit
    assert (model.spec.norm_mean, model.spec.norm_std) == normalization_stats(digits.train)
    if kind == "webdataset":
        g1 = doc[1]
        assert g1["parent"] == 0 and g1["metrics"]["cross"] is not None
        assert g1["diagnostics"]["clip_fraction_train"] is not None


@pytest.mark.parametrize("kind", ["webdataset", "manifest"])
def test_the_same_images_give_the_same_statistics_zeta_and_clip_fraction_in_memory_and_on_disk(kind, digits, tmp_path):
    """One split interface: normalisation statistics, ζ from the parent's radii and the training clip fraction are
    the same numbers whether the training images sit in memory or in shards / image files on disk."""
    _write(kind, tmp_path / "data", digits)
    overrides = [f"data.dataset={kind}", f"data.path={tmp_path / 'data'}", "data.image_size=8"]
    params = write_params(tmp_path / "params.yaml", [*overrides, "geometry.zeta_rule=percentile"])
    on_disk = load_splits(params, Workspace(tmp_path / "ws")).train
    in_memory = digits.train
    assert in_memory.resident() is not None and on_disk.resident() is None  # really two kinds of split
    assert normalization_stats(in_memory) == normalization_stats(on_disk)
    assert normalization_stats(in_memory, sample=300, seed=5) == normalization_stats(on_disk, sample=300, seed=5)

    torch.manual_seed(0)
    radii = parent_radii(build_model(tiny_spec()).eval(), in_memory, seed=3)
    torch.manual_seed(0)  # the same weights, bounded at the median radius: half the images sit on the bound
    parent = build_model(tiny_spec(zeta=float(np.median(radii)))).eval()
    g = params.geometry
    zeta = [choose_zeta(g, 1.0, 0.8, parent, split, seed=3) for split in (in_memory, on_disk)]
    assert zeta[0] == zeta[1] and zeta[0].reason is not None
    clipped = [train_clip_fraction(params, parent, split) for split in (in_memory, on_disk)]
    assert clipped[0] == clipped[1] and 0.0 < clipped[0] < 1.0
