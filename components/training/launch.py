"""Training one model on N processes with torchrun's launcher (``torch.distributed.launcher``, the engine of the
``torchrun`` command): its elastic agent starts the ranks, runs the rendezvous and gathers their results.

``nproc`` ranks on this machine (gloo on CPU, NCCL on GPUs — one GPU per rank); each runs
:func:`~components.training.loop.train_model` inside the process group (components/training/distributed.py says
what a rank does differently). Rank 0 alone writes the epoch checkpoints; the trained weights come back to the
calling process, which writes everything else (the final model, lineage, MLflow). docs/design.md §7.13.
"""

from __future__ import annotations

import copy
import os
import socket
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from components.errors import BctflowError, ConfigError
from components.losses.base import AlignmentLoss
from components.models.encoder import EmbeddingModel
from components.training.data import TrainData
from components.training.device import select_device
from components.training.loop import TrainConfig, TrainResult, train_model

__all__ = ["TrainJob", "train_distributed"]


@dataclass
class TrainJob:
    """The arguments of :func:`~components.training.loop.train_model`, sent to every rank (pickled by the launcher's
    ``spawn``: tensors travel through shared memory)."""

    model: EmbeddingModel
    data: TrainData
    cfg: TrainConfig
    method: AlignmentLoss
    checkpoint_dir: Path
    old_model: EmbeddingModel | None = None
    reference_model: EmbeddingModel | None = None
    run_key: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(job: TrainJob) -> dict[str, Any]:
    """One rank: join the group the launcher set up (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` … in the
    environment), train, and return what rank 0 holds (every other rank returns only its errors)."""
    device = select_device(job.cfg.device)  # type: ignore[arg-type]
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    if device.type == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    else:  # the machine's cores shared out between its ranks
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    # a 1x1 convolution's gradient comes out with strides its bucket does not use (both contiguous for size-1 dims):
    # DDP copies it and warns on every rank, though nothing is wrong
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # the spawn pickler hands every rank the same shared-memory storage: each trains its own copy of the modules
    model, method, old, ref = copy.deepcopy((job.model, job.method, job.old_model, job.reference_model))
    try:
        result = train_model(
            model,
            job.data,
            job.cfg,
            method,
            job.checkpoint_dir,
            old_model=old,
            reference_model=ref,
            run_key=job.run_key,
        )
    except BctflowError as err:  # the same on every rank (the losses are computed on the global batch)
        return {"error": err}
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return {}
    return {
        "model": {k: v.detach().cpu() for k, v in result.model.state_dict().items()},
        "history": result.history,
        "epochs_run": result.epochs_run,
        "resumed_from": result.resumed_from,
        "device": f"{result.device} x{world} ({'nccl' if device.type == 'cuda' else 'gloo'})",
        "seconds": result.seconds,
    }


def train_distributed(job: TrainJob, nproc: int) -> TrainResult:
    """Train ``job`` on ``nproc`` ranks on this machine; returns rank 0's result with the trained weights loaded into
    ``job.model`` (in this process). A :class:`~components.errors.BctflowError` raised by the ranks (a diverged loss,
    a refused checkpoint) is raised here; anything else fails the launch with the ranks' tracebacks."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if nproc < 2:
        raise ConfigError(f"train.nproc {nproc}: distributed training needs at least 2 processes (1: train in-process)")
    if min(job.cfg.batch_size, len(job.data)) < nproc:
        raise ConfigError(
            f"train.batch_size {job.cfg.batch_size} is the global batch and must hold at least one item per rank "
            f"(train.nproc {nproc}; the training selection has {len(job.data)} items); lower train.nproc"
        )
    if select_device(job.cfg.device).type == "cuda" and torch.cuda.device_count() < nproc:  # type: ignore[arg-type]
        raise ConfigError(
            f"train.nproc {nproc} NCCL ranks need {nproc} GPUs, {torch.cuda.device_count()} are visible; "
            "lower train.nproc or set train.device: cpu"
        )
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=uuid.uuid4().hex,
        rdzv_backend="c10d",
        rdzv_endpoint=f"127.0.0.1:{_free_port()}",
        max_restarts=0,
        start_method="spawn",
    )
    outputs = elastic_launch(config, _rank_main)(job)
    for out in outputs.values():
        if "error" in out:
            raise out["error"]
    lead = outputs[0]
    job.model.load_state_dict(lead["model"])
    job.model.eval()
    history = lead["history"]
    return TrainResult(
        job.model,
        history,
        lead["epochs_run"],
        lead["resumed_from"],
        lead["device"],
        lead["seconds"],
        dict(history[-1]) if history else {},
    )
