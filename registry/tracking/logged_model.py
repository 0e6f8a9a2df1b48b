"""The MLflow model of a generation: its serving graph, exported by ``torch.export`` (docs/design.md §7.16).

The logged model has two flavours over one file, ``data/model.pt2``: ``pytorch`` (``mlflow.pytorch.load_model``
returns the graph as a module) and ``python_function`` (``mlflow.pyfunc.load_model(...).predict``). Both take uint8
images (N, H, W, C) and return the retrieval vectors (N, D) float32 that the FAISS index holds
(:class:`components.models.export.RetrievalEmbedder`). The graph holds the weights and every operation, so loading
needs mlflow, torch and numpy only — no bctflow code, no timm, no pickle (MLflow 3 refuses to unpickle a model
unless told to) — and the model's requirements say exactly that.
"""

from __future__ import annotations

import json
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import numpy as np
from packaging.version import Version

__all__ = ["MODEL_NAME", "link_version", "log_embedder", "model_requirements"]

#: the logged model's name inside its run
MODEL_NAME = "model"


def model_requirements() -> list[str]:
    """What loading the model needs, pinned to the versions that exported it (torch without a local build label:
    ``2.15.0+cu132`` → ``torch==2.15.0``, the PyPI release the archive was written by)."""
    return [f"{name}=={Version(package_version(name)).public}" for name in ("mlflow", "torch", "numpy")]


def log_embedder(
    client: Any, checkpoint: Path, example: np.ndarray, run_id: str, metadata: dict[str, Any], tags: dict[str, str]
) -> Any:
    """Export the generation's checkpoint and log it as a model of run ``run_id`` (in the run's experiment, with
    ``tags``); returns MLflow's ``ModelInfo``.

    ``example``: (n ≥ 2, H, W, C) uint8 images of the evaluation split — the input example MLflow stores, and the
    trace ``torch.export`` follows (two or more images keep the batch dimension dynamic). ``metadata``: what the
    MLmodel file records beside the flavours (generation, geometry, what the vectors are).
    """
    import mlflow.pytorch
    import torch
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    from components.models import load_model
    from components.models.export import RetrievalEmbedder

    if example.ndim != 4 or example.dtype != np.uint8 or len(example) < 2:
        raise ValueError(
            f"the input example must be ≥ 2 uint8 images (N, H, W, C), got {example.dtype} {example.shape}"
        )
    embedder = RetrievalEmbedder(load_model(checkpoint))
    with torch.no_grad():
        dim = int(embedder(torch.from_numpy(example[:2])).shape[1])
    h, w, c = example.shape[1:]
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, h, w, c))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, dim))]),
    )
    run = client.get_run(run_id)
    logged = client.create_logged_model(
        run.info.experiment_id, MODEL_NAME, source_run_id=run_id, tags=tags, model_type="embedder"
    )
    return mlflow.pytorch.log_model(
        embedder,
        model_id=logged.model_id,
        name=MODEL_NAME,
        serialization_format="pt2",
        input_example=example,
        signature=signature,
        pip_requirements=model_requirements(),
        metadata=metadata,
        run_id=run_id,
    )


def link_version(client: Any, model_id: str, name: str, version: str) -> None:
    """Record on the logged model that ``name`` version ``version`` registers it — the ``mlflow.modelVersions`` tag
    ``mlflow.register_model`` writes, which the logged model's page reads (else it says "Not registered")."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    found = client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS)
    linked = [*(json.loads(found) if found else []), {"name": name, "version": version}]
    client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(linked)})
