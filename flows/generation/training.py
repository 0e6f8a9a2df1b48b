"""Step 2: train the generation's model (and its independent reference), resumably."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from components.data.selection import DataManifest
from components.io import atomic_path
from components.models import ModelSpec, build_model, load_model, save_model
from components.models.checkpoint import load_torch_safe, read_spec
from components.training import train_model
from components.training.checkpoints import epochs_done
from components.training.data import training_data
from components.training.device import cuda_available
from components.training.job import NodeGroup, TrainJob
from components.training.launch import train_distributed
from components.training.loop import TrainResult
from flows.gallery.data import load_splits
from flows.generation.results import Snapshot, Trained
from flows.planning import GenerationPlan

__all__ = ["staged_epochs", "train_role"]


def staged_epochs(plan: GenerationPlan, role: str) -> int:
    """The role's epochs that an earlier attempt of this run left in staging, where :func:`train_role` resumes: all
    of them when its final model is there, else those of its newest epoch checkpoint (0: none). Planning refused any
    that another run left (flows/planning/make.py), so the files' names tell it."""
    if (plan.role_dir(role) / "model.pt").exists():
        return plan.train_config(role).epochs
    return epochs_done(plan.role_dir(role) / "checkpoints")


def _finished(plan: GenerationPlan, role: str) -> Trained | None:
    """The role's final model of this very run, if an earlier attempt already trained it."""
    final = plan.role_dir(role) / "model.pt"
    if not final.exists():
        return None
    obj = load_torch_safe(final)
    if obj.get("run_key") != plan.role_run_key(role):
        return None
    spec = read_spec(obj, final)
    return Trained(
        role,
        str(final),
        list(obj["history"]),
        float(obj["seconds"]),
        str(obj["device"]),
        None,
        float(obj["curvature"]),
        spec.output_dim,
        spec.stored_dim,
        choices=dict(obj.get("choices", {})),
    )


def _save(plan: GenerationPlan, role: str, result: TrainResult, spec: ModelSpec) -> Trained:
    """Write the role's final model (with its run key and history) and drop its epoch checkpoints."""
    out_dir, k = plan.role_dir(role), float(result.model.curvature)
    extra = {
        "run_key": plan.role_run_key(role),
        "history": result.history,
        "seconds": result.seconds,
        "device": result.device,
        "curvature": k,
        "choices": result.choices,
    }
    save_model(result.model.cpu(), out_dir / "model.pt", extra=extra)
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return Trained(
        role,
        str(out_dir / "model.pt"),
        result.history,
        result.seconds,
        result.device,
        result.resumed_from,
        k,
        spec.output_dim,
        spec.stored_dim,
        choices=dict(result.choices),
    )


def _cache_key(plan: GenerationPlan, snap: Snapshot, role: str) -> str:
    """What shapes the role's trained model, as one digest: its data (the manifest's hash), its parent's checkpoint,
    its spec, training config and alignment (training is deterministic in these)."""
    planned = plan.roles[role]
    shape = {
        "data": snap.data_hash,
        "parent": plan.parent.checkpoint_sha256 if plan.parent is not None else None,
        "spec": repr(planned.spec),
        "config": repr(planned.config),
        "alignment": [planned.alignment, planned.alignment_options],
        "reference": role == "model" and "reference" in plan.roles,
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _from_cache(plan: GenerationPlan, snap: Snapshot, role: str) -> Trained | None:
    """The role's model from ``train.cache_dir`` when one trained from the same inputs is there (written into staging
    under this run's key), else None."""
    cache = plan.params.train.cache_dir
    if cache is None:
        return None
    cached = Path(cache) / _cache_key(plan, snap, role) / "model.pt"
    if not cached.is_file():
        return None
    obj = load_torch_safe(cached)
    obj["run_key"] = plan.role_run_key(role)
    plan.role_dir(role).mkdir(parents=True, exist_ok=True)
    with atomic_path(plan.role_dir(role) / "model.pt") as tmp:
        torch.save(obj, tmp)
    return _finished(plan, role)


def _to_cache(plan: GenerationPlan, snap: Snapshot, role: str) -> None:
    cache = plan.params.train.cache_dir
    if cache is not None:
        out = Path(cache) / _cache_key(plan, snap, role) / "model.pt"
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp:
            shutil.copyfile(plan.role_dir(role) / "model.pt", tmp)


def train_role(
    plan: GenerationPlan,
    snap: Snapshot,
    role: str,
    on_epoch: Callable[[int, dict], None] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> Trained:
    """Train the generation's model (role "model") or its independent reference ("reference"), as planned.

    Resumes from the last epoch checkpoint in staging; if the final model of
    this run already exists there, returns it without training. The alignment
    loss is built once, here. ``on_epoch(epoch, record)`` after each epoch, ``on_step(done, total)`` after each
    training step (for a progress bar). ``train.nproc`` > 1 trains on that many ranks (progress is then not
    reported: the epochs run in the ranks' processes).
    """
    done = _finished(plan, role) or _from_cache(plan, snap, role)
    if done is not None:
        return done
    p, parent, planned = plan.params, plan.parent, plan.roles[role]
    manifest = DataManifest.from_json(Path(snap.manifest).read_text())
    choice = planned.choice()
    loss = choice.build()  # once per training, before the seeded initialisation (a method may own random parts)
    cfg = planned.config
    torch.manual_seed(cfg.seed)  # the initialisation is part of the run: same seed, same model
    model = build_model(planned.spec, p.model.pretrained_path)
    old_model = parent.model() if parent is not None and choice.trains and choice.requires_old else None
    reference = (
        load_model(plan.role_dir("reference") / "model.pt") if choice.trains and choice.needs_reference else None
    )
    split = manifest.take(load_splits(p, plan.workspace).train)
    job = TrainJob(
        model,
        training_data(split, manifest.class_order, workers=p.data.workers, pin=cuda_available()),
        cfg,
        loss,
        plan.role_dir(role) / "checkpoints",
        old_model=old_model,
        reference_model=reference,
        run_key=plan.role_run_key(role),
    )
    # train.nproc x nnodes > 1: torchrun's launcher starts the ranks; rank 0 writes the epoch checkpoints (§7.13)
    t = p.train
    if t.nproc * t.nnodes > 1:
        nodes = NodeGroup(t.nnodes, t.rdzv_endpoint, Path(t.job_dir) if t.job_dir else plan.workspace.jobs_dir)
        result = train_distributed(job, t.nproc, nodes)
    else:
        result = train_model(**vars(job), on_epoch=on_epoch, on_step=on_step)
    trained = _save(plan, role, result, planned.spec)
    _to_cache(plan, snap, role)
    return trained
