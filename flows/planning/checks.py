"""The checks of a planned generation that need its data, its model or the disk, run while it is planned.

:func:`check_generation_inputs` runs in the calling process after :func:`flows.planning.make_plan`, before any
Prefect server starts and before anything is trained or written, so every input that can be known before
training is refused in seconds with one line (docs/bad-inputs.md):

* the workspace folder can be written, and its disk has room for the run (an estimate: epoch checkpoints with
  their optimizer state, final models, galleries and indexes; see :func:`disk_estimate`);
* the MLflow tracking store is reachable and not damaged (:func:`registry.stores.check_tracking_store`);
* the gallery store (params ``gallery.store``) is one the catalog knows, its package is installed and its
  ``gallery.uri`` answers (:meth:`components.indexing.backend.VectorStore.check`);
* ``train.device`` exists on this machine;
* the labelled evaluation split has at least two images of every class (leave-one-out retrieval);
* every model the generation trains builds: backbone name, ``backbone_kwargs``, ``small_stem``, pretrained
  weights — on PyTorch's ``meta`` device, which allocates no memory — and its backbone runs on a batch of the
  generation's image size (``backbone_kwargs`` that build a network that cannot run);
* the FAISS index config fits the galleries it will index (``nlist``, ``pq_m``, ``pq_nbits``).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from components.data.sources.split import SourceDataset
from components.errors import ConfigError, DataError
from components.models import ModelSpec, build_meta_model
from components.models.backbone import check_backbone_runs
from components.training.device import select_device
from flows.gallery.data import open_corpus
from flows.params import Params
from flows.params.specs import gallery_store, index_options
from flows.runtime.workspace import Workspace
from registry.stores import check_tracking_store

__all__ = ["DiskEstimate", "check_models_and_disk", "check_run_environment", "disk_estimate"]

#: float32 copies of a model's parameters in one epoch checkpoint: weights + two optimizer moments (Adam/AdamW)
_COPIES_PER_EPOCH_CHECKPOINT = 3
#: float32 copies of each gallery vector a generation writes: its evaluation gallery, its index, the reference's one
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


def check_evaluation_split(test: SourceDataset, dataset: str) -> None:
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
    """Build the model on the meta device (no memory, no compute) and run its backbone on a batch of the images it
    will see (some ``backbone_kwargs`` only fail there); its parameter count."""
    model = build_meta_model(spec, pretrained_path)
    n_params = sum(p.numel() for p in model.parameters())
    check_backbone_runs(
        model.backbone,
        model.feature_dim,
        name=spec.backbone,
        kwargs=spec.backbone_kwargs,
        in_chans=spec.in_chans,
        size=spec.input_size or spec.image_size,
    )
    return n_params


@dataclass(frozen=True)
class DiskEstimate:
    """Bytes a generation writes, by kind (an estimate from the parameter count and the gallery sizes)."""

    checkpoints: int
    galleries: int

    @property
    def total(self) -> int:
        return self.checkpoints + self.galleries


def disk_estimate(params: Params, roles: int, n_params: int, width: int, n_gallery: int, n_corpus: int) -> DiskEstimate:
    """Epoch checkpoints (weights + optimizer state, ``train.keep_checkpoints`` of them), the final model and its
    MLflow copy, per trained role (``roles`` of them); the evaluation galleries and their indexes; generation 0's
    corpus parts and index."""
    per_model = 4 * n_params * (params.train.keep_checkpoints * _COPIES_PER_EPOCH_CHECKPOINT + 2)
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


def check_run_environment(params: Params, ws: Workspace) -> None:
    """What the run needs of this machine before any data is read: a writable workspace, a tracking store that
    answers, a gallery store that is known, installed and reachable, the training device."""
    check_workspace_writable(ws.home)
    check_tracking_store(params.tracking.mlflow_uri, ws.home)
    gallery_store(params, ws.home).check()
    select_device(params.train.device)


def check_models_and_disk(
    params: Params, ws: Workspace, specs: list[ModelSpec], test: SourceDataset, dataset: str, first: bool
) -> None:
    """Every model of the generation (``specs``) builds; the index config fits its galleries (the evaluation split
    ``test``, and generation 0's (``first``) corpus); the workspace's disk has room for it all."""
    check_evaluation_split(test, dataset)
    n_params = max(_build_on_meta(spec, params.model.pretrained_path) for spec in specs)
    spec = specs[0]
    space = spec.retrieval_space
    store, options = gallery_store(params, ws.home), index_options(params)
    width = store.check_index(options, space, spec.stored_dim, len(test))
    corpus = open_corpus(params, ws) if first else None
    if corpus is not None:
        store.check_index(options, space, spec.stored_dim, len(corpus))
    need = disk_estimate(params, len(specs), n_params, width, len(test), len(corpus or ()))
    check_free_disk(ws.home, need)
