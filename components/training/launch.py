"""Training one model on N processes with torchrun's launcher (``torch.distributed.launcher``, the engine of the
``torchrun`` command): its elastic agent starts the ranks, runs the c10d rendezvous and gathers their results.

``nproc`` ranks on this machine (gloo on CPU, NCCL on GPUs — one GPU per rank), and as many on every other node of
a :class:`~components.training.job.NodeGroup` (each running :func:`serve_node`, ``bctflow train-node``); each rank
runs :func:`~components.training.loop.train_model` inside the process group (components/training/distributed.py
says what a rank does differently). Global rank 0 alone writes the epoch checkpoints; the trained weights come back
to the calling process, which writes everything else (the final model, lineage, MLflow). docs/design.md §7.13.
"""

from __future__ import annotations

import copy
import os
import shutil
import socket
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from components.errors import BctflowError, ConfigError
from components.training.device import select_device
from components.training.job import NodeGroup, PublishedJob, TrainJob, publish_job, wait_for_jobs
from components.training.loop import TrainResult, train_model

__all__ = ["NodeGroup", "TrainJob", "serve_node", "train_distributed"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(job: TrainJob) -> dict[str, Any]:
    """One rank: join the group the launcher set up (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` … in the
    environment), train, and return the weights from each node's first rank (every other rank returns only its
    errors)."""
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
    world = dist.get_world_size()
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
    if local_rank != 0:  # every rank holds the same weights; each node's first returns them
        return {}
    return {
        "model": {k: v.detach().cpu() for k, v in result.model.state_dict().items()},
        "history": result.history,
        "epochs_run": result.epochs_run,
        "resumed_from": result.resumed_from,
        "device": f"{result.device} x{world} ({'nccl' if device.type == 'cuda' else 'gloo'})",
        "seconds": result.seconds,
        "choices": result.choices,
    }


def _launch(job: TrainJob, nproc: int, nodes: NodeGroup, run_id: str) -> dict[str, Any]:
    """Start this node's ``nproc`` ranks and wait for them; what this node's first rank returns."""
    from torch.distributed.elastic.rendezvous.api import RendezvousTimeoutError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=nodes.count,
        max_nodes=nodes.count,
        nproc_per_node=nproc,
        run_id=run_id,
        rdzv_backend="c10d",
        rdzv_endpoint=nodes.endpoint if nodes.count > 1 else f"127.0.0.1:{_free_port()}",
        rdzv_configs={"join_timeout": nodes.join_timeout},
        max_restarts=0,
        start_method="spawn",
    )
    try:
        outputs = elastic_launch(config, _rank_main)(job)  # global rank -> return value, for this node's ranks
    except RendezvousTimeoutError:
        raise ConfigError(
            f"the {nodes.count} nodes did not all join the rendezvous at {nodes.endpoint} within "
            f"{nodes.join_timeout} s; start `bctflow train-node --job-dir {nodes.job_dir}` on every other node "
            "(its output says why one could not join)"
        ) from None
    for out in outputs.values():
        if "error" in out:
            raise out["error"]
    return outputs[min(outputs)]


def train_distributed(job: TrainJob, nproc: int, nodes: NodeGroup | None = None) -> TrainResult:
    """Train ``job`` on ``nproc`` ranks on this machine (and as many on every other node of ``nodes``, each running
    :func:`serve_node`); returns the result with the trained weights loaded into ``job.model`` (in this process).
    A :class:`~components.errors.BctflowError` raised by the ranks (a diverged loss, a refused checkpoint) is raised
    here; anything else fails the launch with the ranks' tracebacks."""
    nodes = nodes or NodeGroup()
    if nproc * nodes.count < 2:
        raise ConfigError(f"train.nproc {nproc}: distributed training needs at least 2 processes (1: train in-process)")
    world = nproc * nodes.count
    if min(job.cfg.batch_size, len(job.data)) < world:
        raise ConfigError(
            f"train.batch_size {job.cfg.batch_size} is the global batch and must hold at least one item per rank "
            f"({world} ranks; the training selection has {len(job.data)} items); lower train.nproc"
        )
    if select_device(job.cfg.device).type == "cuda" and torch.cuda.device_count() < nproc:  # type: ignore[arg-type]
        raise ConfigError(
            f"train.nproc {nproc} NCCL ranks need {nproc} GPUs, {torch.cuda.device_count()} are visible; "
            "lower train.nproc or set train.device: cpu"
        )
    run_id = uuid.uuid4().hex
    folder = nodes.job_dir / run_id if nodes.count > 1 and nodes.job_dir is not None else None
    if folder is not None:  # the other nodes read the job from there (components/training/job.py)
        publish_job(job, folder, run_id=run_id, nproc=nproc, nodes=nodes)
    try:
        lead = _launch(job, nproc, nodes, run_id)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
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
        dict(lead["choices"]),
    )


def serve_node(job_dir: Path, *, once: bool = False, log: Callable[[str], None] = print) -> None:
    """Another node of a multi-node training: join every job the leader publishes in ``job_dir`` with this node's
    ranks (``bctflow train-node``); ``once``: return after one job (and raise its error). Without ``once`` a job
    that fails is reported and the node waits for the next."""

    def run(published: PublishedJob) -> None:
        log(f"job {published.run_id}: {published.nproc_per_node} ranks here, {published.nodes} nodes")
        nodes = NodeGroup(published.nodes, published.endpoint, job_dir, published.join_timeout)
        try:
            _launch(published.job, published.nproc_per_node, nodes, published.run_id)
        except BctflowError as err:
            if once:
                raise
            log(f"job {published.run_id}: failed: {err}")
            return
        log(f"job {published.run_id}: done")

    job_dir.mkdir(parents=True, exist_ok=True)
    wait_for_jobs(job_dir, run, once=once)
