"""Small builders shared by tests."""

from __future__ import annotations

from components.models import ModelSpec


def tiny_spec(**kw) -> ModelSpec:
    """A narrow ResNet-18 on 8×8 grey images: real timm code, milliseconds per batch."""
    base = dict(
        backbone="resnet18",
        backbone_kwargs={"channels": [8, 8, 16, 16]},
        embed_dim=16,
        geometry="lorentz",
        num_classes=10,
        class_order=tuple(range(10)),
        in_chans=1,
        image_size=8,
        small_stem=True,
        curvature=1.0,
        learn_curvature=False,
        zeta=1.0,
        classifier_scale=16.0,
        mlr_scale=1.0,
        classifier="cosine",
        bn_neck=False,
        norm_mean=(0.5,),
        norm_std=(0.25,),
        features="embedding",
    )
    base.update(kw)
    return ModelSpec(**base)


def run_generation(home, params_path, spec: dict | None = None, overrides: list[str] | None = None) -> dict:
    """One generation through the real flow, as the CLI runs it: parse params once, plan once, run."""
    from flows.generation.flow import new_generation
    from flows.params import GenerationSpec, load_params
    from flows.planning import make_plan

    params = load_params(params_path, overrides)
    return new_generation(make_plan(params, home, GenerationSpec(**spec) if spec else None))


def run_backfill(home, params_path, overrides: list[str] | None = None, **request) -> dict:
    """One backfill through the real flow (``request``: target, fraction, order, seed, force)."""
    from flows.backfill.flow import backfill
    from flows.backfill.make import plan_backfill
    from flows.params import load_params
    from flows.runtime.workspace import Workspace

    return backfill(plan_backfill(load_params(params_path, overrides), Workspace(home), **request))


def write_params(path, overrides: list[str] | None = None):
    """params.yaml with the repository's defaults, the tiny settings and ``overrides``, written to ``path``."""
    import yaml

    from flows.params import apply_overrides, load_params
    from tests.conftest import REPO, TINY_OVERRIDES

    p = apply_overrides(load_params(REPO / "params.yaml"), TINY_OVERRIDES + list(overrides or []))
    path.write_text(yaml.safe_dump(p.as_dict(), sort_keys=False))
    return p


def first_generation(root, overrides: list[str] | None = None) -> tuple:
    """``(home, params file)``: ``root/params.yaml`` (:func:`write_params` with ``overrides``) and a workspace
    ``root/ws`` holding generation 0, trained on classes 0–4 by the real flow."""
    params = root / "params.yaml"
    write_params(params, overrides)
    home = root / "ws"
    run_generation(home, params, {"name": "g0", "classes": [0, 1, 2, 3, 4]})
    return home, params


def copy_workspace(template, to) -> tuple:
    """``(home, params file)`` of a copy, in ``to``, of ``template``'s workspace ``ws`` (``cp -a``, as a user copies
    one: tests/flows/runtime/test_workspace_copy.py) and its ``params.yaml``."""
    import shutil
    import subprocess

    subprocess.run(["cp", "-a", str(template / "ws"), str(to / "ws")], check=True)
    shutil.copy2(template / "params.yaml", to / "params.yaml")
    return to / "ws", to / "params.yaml"


def generation_record(gid: int = 0, parent: int | None = None, **fields):
    """A lineage row of a Lorentz generation ``gid`` (``fields`` override any column)."""
    from registry.records import GenerationRecord

    base = dict(
        id=gid,
        name=f"g{gid}",
        parent_id=parent,
        dataset="digits",
        data_hash=f"h{gid}",
        data_snapshot=f"/d/{gid}",
        class_order=[0, 1],
        architecture={"backbone": "resnet18"},
        geometry="lorentz",
        alignment="independent",
        hyperparameters={},
        zeta=1.0,
        curvature=1.0,
        embed_dim=16,
        checkpoint_path=f"/c/{gid}",
        index_path=f"/i/{gid}/index",
        params_digest="x",
    )
    base.update(fields)
    return GenerationRecord(**base)


#: what :func:`train_config` keeps at the schema's defaults before those moved (HBCT's λ, no label smoothing): the
#: tests' recorded loss values were taken with them
RECORDED_TRAIN_DEFAULTS = {"align_weight": 0.3, "label_smoothing": 0.0}


def train_config(**fields):
    """The params schema's training defaults, at :data:`RECORDED_TRAIN_DEFAULTS`, with ``fields`` changed (a
    TrainConfig has no defaults of its own)."""
    import dataclasses

    from flows.params import Params
    from flows.params.specs import train_config_from_params

    return dataclasses.replace(train_config_from_params(Params()), **{**RECORDED_TRAIN_DEFAULTS, **fields})


def write_live_gallery(live_dir, index_dir, generation: int = 0, seed: int = 0) -> None:
    """A real (tiny, random Lorentz) index saved at ``index_dir``, its evaluation gallery beside it (unless one is
    there) and ``live_dir/CURRENT`` naming it: what planning verifies before training, for hand-made lineages
    (``seed``: its random points)."""
    from pathlib import Path

    import numpy as np
    import torch

    from components.geometry import create_space, expmap0
    from components.indexing.gallery import GalleryEmbeddings
    from components.indexing.live import LivePointer
    from components.indexing.parts import PartWriter, StoredPart
    from components.indexing.stores.faiss import GalleryIndex
    from components.indexing.version import GalleryVersion

    z = np.random.default_rng(seed).normal(size=(40, 16))
    points = expmap0(torch.from_numpy(z), 1.0).numpy()
    GalleryIndex.build(points, np.arange(40), space=create_space("lorentz", 1.0), generation=generation).save(index_dir)
    store = GalleryVersion.of_index(index_dir).evaluation_store
    if not store.is_dir():
        rows = GalleryEmbeddings(
            "lorentz", 1.0, z.astype(np.float32), points.astype(np.float32), np.arange(40), np.arange(40) % 5,
            np.zeros(40, bool), np.zeros((40, 5), np.float32),
        )  # fmt: skip
        writer = PartWriter(store, chunk_size=40)
        writer.add(StoredPart(rows, np.full(40, generation, np.int64)))
        writer.finish()
    LivePointer(Path(live_dir)).switch(
        Path(index_dir), serving_index=str(index_dir), generation=generation, compatible_generations=[generation]
    )


def lineage_story(path):
    """A lineage store (SQLite file ``path``) holding g0 → g1 (compatible, map cross 0.6 vs g0's 0.5) → a full
    backfill with g1 (ζ restarts at 1.0) → g2 (not compatible), then g2 forced into production."""
    from datetime import UTC, datetime

    from registry.lineage import LineageDB
    from registry.records import BackfillRecord, EvaluationRecord, GenerationBundle, PointerRecord

    store = LineageDB(f"sqlite:///{path}")
    g0 = generation_record(0, None, zeta=1.0, mlflow_version="1", mlflow_run_id="run0", promoted=True)
    store.commit_generation(
        GenerationBundle(
            g0,
            evaluations=[EvaluationRecord(0, 0, "map", 0.5)],
            pointer=PointerRecord(0, "/i/0", "g0", compatible_generations=[0]),
            promotion=(None, "generation 0"),
        )
    )
    g1 = generation_record(1, 0, alignment="hbct", zeta=1.2, mlflow_version="2", mlflow_run_id="run1")
    g1.compatible_with_live = True
    store.commit_generation(GenerationBundle(g1, evaluations=[EvaluationRecord(1, 0, "map", 0.6)]))
    event = BackfillRecord(0, 1, "full", 1.0, "all", 539, 539, "/live/v1/index", True, {}, datetime.now(UTC), 1.0)
    store.record_backfill(
        event,
        PointerRecord(
            1,
            "/live/v1/index",
            "full",
            "/live/v1/m.pt",
            1.0,
            [1],
            store="milvus",
            collection="demo_g1_v1",
            rows_by_generation={1: 539},
            index_params={"index_type": "HNSW", "M": 16},
        ),
        [0],
        promote=True,
    )
    g2 = generation_record(2, 1, alignment="hbct", zeta=1.2, mlflow_version="3", mlflow_run_id="run2")
    g2.compatible_with_live = False
    store.commit_generation(GenerationBundle(g2))
    store.record_promotion(2, forced=True, by="alice", reason="hotfix")
    return store
