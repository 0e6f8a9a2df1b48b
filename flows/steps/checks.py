"""The checks of a planned generation that need its data, its model or the disk, run while it is planned.

:func:`check_generation_inputs` runs in the calling process after :func:`flows.plan.make_plan`, before any
Prefect server starts and before anything is trained or written, so every input that can be known before
training is refused in seconds with one line (docs/bad-inputs.md):

* the workspace folder can be written, and its disk has room for the run (an estimate: epoch checkpoints with
  their optimizer state, final models, galleries and indexes; see :func:`disk_estimate`);
* the MLflow tracking store is reachable and not damaged (:func:`registry.stores.check_tracking_store`);
* ``train.device`` exists on this machine;
* the class selection and data fraction select training data (the dataset is loaded here, once per process:
  the flow's steps reuse it);
* the labelled evaluation split has at least two images of every class (leave-one-out retrieval);
* the model builds: backbone name, ``backbone_kwargs``, ``small_stem``, pretrained weights — on PyTorch's
  ``meta`` device, which allocates no memory;
* the FAISS index config fits the galleries it will index (``nlist``, ``pq_m``, ``pq_nbits``).
"""

from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from components.data.base import ArrayDataset
from components.errors import ConfigError, DataError
from components.models import ModelSpec, build_model
from components.models.checkpoint import load_torch_safe, read_spec
from components.training.device import select_device
from flows.plan import ROLES, GenerationPlan
from flows.steps.context import load_splits
from flows.steps.corpus import index_config, open_corpus
from flows.steps.snapshot import select_generation_data
from flows.steps.training import role_spec
from registry.stores import check_tracking_store

__all__ = ["DiskEstimate", "check_generation_inputs", "disk_estimate"]

#: float32 copies of a model's parameters in one epoch checkpoint: weights + two optimizer moments (Adam/AdamW)
_COPIES_PER_EPOCH_CHECKPOINT = 3
#: float32 copies of each gallery vector a generation writes: gallery.npz, the index, the reference's gallery
_COPIES_PER_GALLERY_VECTOR = 3
#: free space asked for beyond the estimate
_MARGIN = 1.25


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists():
        p = p.parent
    return p


def check_workspace_writable(home: Path) -> None:
    """The workspace is a folder (or can be created as one) on a writable file system."""
    if home.exists() and not home.is_dir():
        raise ConfigError(f"the workspace {home} is a file, not a folder; point --home (or $BCTFLOW_HOME) at a folder")
    base = _existing_ancestor(home)
    if not base.is_dir():
        raise ConfigError(f"the workspace {home} cannot be created: {base} is a file; choose another --home")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(
            f"the workspace {home} is not writable ({base} is read-only for this user); choose another --home or "
            "fix its permissions"
        )


def check_evaluation_split(test: ArrayDataset, dataset: str) -> None:
    """Leave-one-out retrieval needs a second image of the query's class in the gallery: every class of the
    labelled evaluation split has at least two images."""
    classes, counts = np.unique(test.labels, return_counts=True)
    few = classes[counts < 2]
    if len(few):
        shown = ", ".join(str(int(c)) for c in few[:10]) + ("…" if len(few) > 10 else "")
        raise DataError(
            f"the evaluation split of {dataset} has fewer than 2 images of class(es) {shown}: their queries have "
            "nothing to retrieve (leave-one-out); add test images of those classes or raise data.max_test_per_class"
        )


def _build_on_meta(spec: ModelSpec, pretrained_path: str | None) -> int:
    """Build the model on the meta device (no memory, no compute); its parameter count."""
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")  # "copying … to a meta parameter … is a no-op": intended here
        model = build_model(spec, pretrained_path)
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class DiskEstimate:
    """Bytes a generation writes, by kind (an estimate from the parameter count and the gallery sizes)."""

    checkpoints: int
    galleries: int

    @property
    def total(self) -> int:
        return self.checkpoints + self.galleries


def disk_estimate(plan: GenerationPlan, n_params: int, width: int, n_gallery: int, n_corpus: int) -> DiskEstimate:
    """Epoch checkpoints (weights + optimizer state, ``train.keep_checkpoints`` of them), the final model and its
    MLflow copy, per trained role; the evaluation galleries and their indexes; generation 0's corpus parts and
    index."""
    roles = 2 if plan.reference else 1
    per_model = 4 * n_params * (plan.params.train.keep_checkpoints * _COPIES_PER_EPOCH_CHECKPOINT + 2)
    galleries = 4 * width * (n_gallery * _COPIES_PER_GALLERY_VECTOR + 2 * n_corpus)
    return DiskEstimate(per_model * roles, galleries)


def check_free_disk(home: Path, need: DiskEstimate) -> None:
    """The workspace's disk has room for ``need`` (with a margin)."""
    base = _existing_ancestor(home)
    free = shutil.disk_usage(base).free
    if free < need.total * _MARGIN:
        mb = 1 / 2**20
        raise ConfigError(
            f"the workspace {home} needs about {need.total * mb:.0f} MB free (checkpoints {need.checkpoints * mb:.0f}"
            f" MB, galleries and indexes {need.galleries * mb:.0f} MB) but its disk has {free * mb:.0f} MB; free "
            "space, lower train.keep_checkpoints, or choose another --home"
        )


def check_generation_inputs(plan: GenerationPlan) -> None:
    """Every check above, cheapest first; raises the first problem found (a ConfigError or DataError)."""
    p, ws = plan.params, plan.workspace
    check_workspace_writable(ws.home)
    check_tracking_store(p.tracking.mlflow_uri, ws.home)
    select_device(p.train.device)
    splits = load_splits(p, ws)
    parent = plan.parent
    classes = "all" if plan.classes == "all" else list(plan.classes)
    manifest = select_generation_data(
        p, splits, plan.gen_id, classes, plan.fraction, parent.class_order if parent else None
    )
    check_evaluation_split(splits.test, splits.name)
    parent_spec = read_spec(load_torch_safe(Path(parent.checkpoint)), parent.checkpoint) if parent else None
    placeholder = ((0.5,) * splits.train.image_shape[2], (0.25,) * splits.train.image_shape[2])
    n_params = 0
    for role in ROLES if plan.reference else ("model",):
        _, spec = role_spec(plan, role, manifest, splits.train, parent_spec, stats=placeholder)
        n_params = max(n_params, _build_on_meta(spec, p.model.pretrained_path))
    geometry = spec.geometry if spec.features == "embedding" else "euclidean"
    config = index_config(p)
    config.check_buildable(geometry, spec.stored_dim, len(splits.test))
    corpus = open_corpus(p, ws) if plan.gen_id == 0 else None
    if corpus is not None:
        config.check_buildable(geometry, spec.stored_dim, len(corpus))
    width = config.stored_width(geometry, spec.stored_dim)
    check_free_disk(ws.home, disk_estimate(plan, n_params, width, len(splits.test), len(corpus or ())))
