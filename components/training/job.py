"""A distributed training job: what every rank trains, and the folder that carries it to other nodes
(docs/design.md §7.13).

The node that runs the flow (the leader) writes the training job into ``<job_dir>/<run id>/`` on storage every node
sees, then joins the rendezvous; every other node runs ``bctflow train-node --job-dir <job_dir>``, which waits for
a job, joins the same rendezvous (torchrun's c10d backend at the leader's ``rdzv_endpoint``) with its own ranks, and
trains. Everything in the folder is read without unpickling: JSON, models and states through
``torch.load(weights_only=True)``, the training selection as ``.npy`` arrays.

Files: ``job.json`` (written last: its presence means the job is complete), ``model.pt`` (the initialised model and
the loss's state), ``old.pt`` / ``reference.pt`` (the frozen models, when the method uses them),
``images.npy`` / ``labels.npy`` (the in-memory selection; a split streamed from disk cannot be shipped yet).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from components.data.batches import ImageTensor
from components.errors import ConfigError
from components.io import atomic_write_text
from components.losses import create_alignment
from components.losses.base import AlignmentLoss
from components.models.checkpoint import load_model, load_torch_safe, save_model
from components.models.encoder import EmbeddingModel
from components.training.data import TensorData, TrainData, as_train_data
from components.training.loop import TrainConfig

__all__ = ["JOB_FORMAT", "NodeGroup", "PublishedJob", "TrainJob", "publish_job", "read_job", "wait_for_jobs"]

JOB_FORMAT = "bctflow-ddp-job/1"


@dataclass
class TrainJob:
    """The arguments of :func:`~components.training.loop.train_model`, sent to every rank (on this node pickled by
    the launcher's ``spawn``, tensors through shared memory; to other nodes through :func:`publish_job`)."""

    model: EmbeddingModel
    data: TrainData
    cfg: TrainConfig
    method: AlignmentLoss
    checkpoint_dir: Path
    old_model: EmbeddingModel | None = None
    reference_model: EmbeddingModel | None = None
    run_key: str = ""


@dataclass(frozen=True)
class NodeGroup:
    """Where the ranks of one training meet: ``count`` nodes (1: this machine only) at ``endpoint`` (host:port of
    the c10d rendezvous, on the leader), the job shared through ``job_dir`` (storage every node mounts)."""

    count: int = 1
    endpoint: str = ""
    job_dir: Path | None = None
    #: seconds the rendezvous waits for every node before the run fails
    join_timeout: int = 900

    def __post_init__(self) -> None:
        if self.count > 1 and (not self.endpoint or self.job_dir is None):
            raise ConfigError(
                f"train.nnodes {self.count} needs train.rdzv_endpoint (host:port on this node, reachable from the "
                "others) and a job folder every node can read (train.job_dir)"
            )


@dataclass
class PublishedJob:
    """A job read back from its folder: the arguments of ``train_model`` and how the ranks meet."""

    run_id: str
    nproc_per_node: int
    nodes: int
    endpoint: str
    join_timeout: int
    job: TrainJob


def publish_job(job: TrainJob, folder: Path, *, run_id: str, nproc: int, nodes: NodeGroup) -> None:
    """Write ``job`` into ``folder``; ``job.json`` last."""
    data = as_train_data(job.data)
    if not isinstance(data, TensorData):
        raise ConfigError(
            "multi-node training ships the training selection to the other nodes in the job folder, which works for "
            "an in-memory selection only; train a split streamed from disk with train.nnodes 1"
        )
    folder.mkdir(parents=True, exist_ok=True)
    method_state = {k: v.detach().cpu() for k, v in job.method.state_dict().items()}
    save_model(job.model, folder / "model.pt", extra={"method_state": method_state})
    for name, model in (("old", job.old_model), ("reference", job.reference_model)):
        if model is not None:
            save_model(model, folder / f"{name}.pt")
    np.save(folder / "images.npy", data.data.images.cpu().numpy())
    np.save(folder / "labels.npy", data.data.labels.cpu().numpy())
    doc = {
        "format": JOB_FORMAT,
        "run_id": run_id,
        "nproc_per_node": nproc,
        "nodes": nodes.count,
        "endpoint": nodes.endpoint,
        "join_timeout": nodes.join_timeout,
        "cfg": dataclasses.asdict(job.cfg),
        "method": {"name": job.method.name, "options": dataclasses.asdict(job.method.options)},
        "checkpoint_dir": str(job.checkpoint_dir),
        "run_key": job.run_key,
        "old": job.old_model is not None,
        "reference": job.reference_model is not None,
    }
    atomic_write_text(folder / "job.json", json.dumps(doc, indent=1))


def read_job(folder: Path) -> PublishedJob:
    """The job in ``folder`` (ConfigError if it was written by another format)."""
    doc = json.loads((folder / "job.json").read_text())
    if doc.get("format") != JOB_FORMAT:
        raise ConfigError(f"{folder / 'job.json'} has format {doc.get('format')!r}, expected {JOB_FORMAT!r}")
    method = create_alignment(doc["method"]["name"], **doc["method"]["options"])
    method.load_state_dict(load_torch_safe(folder / "model.pt")["method_state"])
    images = torch.from_numpy(np.load(folder / "images.npy", allow_pickle=False))
    labels = torch.from_numpy(np.load(folder / "labels.npy", allow_pickle=False))
    job = TrainJob(
        load_model(folder / "model.pt"),
        TensorData(ImageTensor(images, labels)),
        TrainConfig(**doc["cfg"]),
        method,
        Path(doc["checkpoint_dir"]),
        old_model=load_model(folder / "old.pt") if doc["old"] else None,
        reference_model=load_model(folder / "reference.pt") if doc["reference"] else None,
        run_key=doc["run_key"],
    )
    return PublishedJob(doc["run_id"], doc["nproc_per_node"], doc["nodes"], doc["endpoint"], doc["join_timeout"], job)


def wait_for_jobs(job_dir: Path, run: Callable[[PublishedJob], None], *, once: bool = False, poll: float = 1.0) -> None:
    """Run every job that appears in ``job_dir`` (each once, in the order they appear); ``once``: stop after one."""
    done: set[str] = set()
    while True:
        for doc in sorted(job_dir.glob("*/job.json")):
            if doc.parent.name in done:
                continue
            done.add(doc.parent.name)
            try:
                published = read_job(doc.parent)
            except FileNotFoundError:  # the leader finished and removed it meanwhile
                continue
            run(published)
            if once:
                return
        time.sleep(poll)
