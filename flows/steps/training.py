"""Step 2: train the generation's model (and its independent reference), resumably."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from flows.steps.context import load_splits
from flows.plan import GenerationPlan
from flows.steps.results import Snapshot, Trained
from flows.specs import model_spec_from_params
from components.data.base import DatasetSplits
from components.data.batches import to_image_tensor
from components.data.selection import DataManifest
from components.losses import create_alignment
from components.models import ModelSpec, build_model, load_model, save_model
from components.models.checkpoint import load_torch_safe, read_spec
from components.training import train_model
from components.training.device import cuda_available

__all__ = ["label_map", "train_role"]


def _model_spec(plan: GenerationPlan, snap: Snapshot, splits: DatasetSplits, overrides: dict | None = None) -> ModelSpec:
    """The new model's spec from params, the data, and the alignment method's requirements."""
    return model_spec_from_params(
        plan.p, splits.train, snap.class_order, snap.class_names,
        geometry=plan.geometry, zeta=plan.zeta, backbone=plan.backbone, backbone_kwargs=plan.backbone_kwargs, overrides=overrides,
    )


def _label_map(new_order: tuple[int, ...], old_order: tuple[int, ...]) -> torch.Tensor:
    pos = {c: i for i, c in enumerate(old_order)}
    return torch.tensor([pos.get(c, -1) for c in new_order], dtype=torch.long)


def label_map(new_order: tuple[int, ...], old_order: tuple[int, ...]) -> torch.Tensor:
    """(C_new,) the old label index of each new label, −1 for classes the old model never saw."""
    pos = {c: i for i, c in enumerate(old_order)}
    return torch.tensor([pos.get(c, -1) for c in new_order], dtype=torch.long)


def train_role(plan: GenerationPlan, snap: Snapshot, role: str, on_epoch: Callable[[int, dict], None] | None = None) -> Trained:
    """Train the generation's model (role "model") or its independent reference ("reference").

    Resumes from the last epoch checkpoint in staging; if the final model of
    this run already exists there, returns it without training.
    """
    p, ws = plan.p, plan.workspace
    out_dir = plan.role_dir(role)
    final = out_dir / "model.pt"
    run_key = plan.role_run_key(role)
    if final.exists():
        obj = load_torch_safe(final)
        if obj.get("run_key") == run_key:
            spec = read_spec(obj, final)
            return Trained(role, str(final), list(obj["history"]), float(obj["seconds"]), str(obj["device"]), None, float(obj["curvature"]), spec.output_dim, spec.stored_dim)
    splits = load_splits(p, ws)
    manifest = DataManifest.from_json(Path(snap.manifest).read_text())
    train = manifest.take(splits.train)
    method = create_alignment(plan.role_alignment(role), plan.alignment_options if role == "model" else None)
    parent = plan.parent
    parent_spec = read_spec(load_torch_safe(Path(parent.checkpoint)), parent.checkpoint) if parent is not None else None
    model_method = method if role == "model" else create_alignment(plan.alignment, plan.alignment_options)
    overrides = model_method.model_overrides(parent_spec)
    if role == "reference":  # the reference is an independent model in the same retrieval space
        overrides = {k: v for k, v in overrides.items() if k == "features"}
    spec = _model_spec(plan, snap, splits, overrides)
    method.check_lineage(spec.class_order, parent_spec)
    cfg = plan.train_config(role)
    torch.manual_seed(cfg.seed)  # the initialisation is part of the run: same seed, same model
    model = build_model(spec, p.model.pretrained_path)
    old_model = lmap = reference = None
    if parent is not None and method.trains and method.requires_old:
        old_model = load_model(Path(parent.checkpoint))
        lmap = label_map(snap.class_order, parent.class_order)
    if method.trains and method.requires_reference:
        reference = load_model(plan.role_dir("reference") / "model.pt")
    data = to_image_tensor(train.images, manifest.model_labels(), pin=cuda_available())
    result = train_model(
        model,
        data,
        cfg,
        method,
        out_dir / "checkpoints",
        old_model=old_model,
        label_map=lmap,
        reference_model=reference,
        run_key=run_key,
        on_epoch=on_epoch,
    )
    k = float(result.model.curvature)
    save_model(
        result.model.cpu(),
        final,
        extra={"run_key": run_key, "history": result.history, "seconds": result.seconds, "device": result.device, "curvature": k},
    )
    shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
    return Trained(role, str(final), result.history, result.seconds, result.device, result.resumed_from, k, spec.output_dim, spec.stored_dim)
