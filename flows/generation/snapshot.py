"""Step 1: snapshot the generation's training data — the selection the plan made — with DVC."""

from __future__ import annotations

from components.errors import DataError
from flows.gallery.data import load_splits, select_generation_data
from flows.generation.results import Snapshot
from flows.planning import GenerationPlan
from registry.data_snapshots import DataSnapshots

__all__ = ["snapshot_data"]


def snapshot_data(plan: GenerationPlan) -> Snapshot:
    """Snapshot the generation's planned training data (the manifest the plan selected) with DVC."""
    ws = plan.workspace
    splits = load_splits(plan.params, ws)
    planned = {plan.selection.fingerprint, plan.data_fingerprint or plan.selection.fingerprint}
    if planned != {splits.fingerprint}:
        raise DataError(
            f"dataset {splits.name} changed since this run was planned (its fingerprint differs); run the command again"
        )
    classes = "all" if plan.classes == "all" else list(plan.classes)
    manifest = select_generation_data(
        plan.params, splits, plan.gen_id, classes, plan.fraction, plan.parent.class_order if plan.parent else None
    )
    if manifest.sha256 != plan.selection.sha256:
        raise DataError(
            f"the training selection of generation {plan.gen_id} differs from the one planned (manifest sha256 "
            f"{manifest.sha256[:12]}…, planned {plan.selection.sha256[:12]}…); run the command again"
        )
    info = DataSnapshots(ws.data_dir).snapshot(f"gen_{plan.gen_id:03d}", manifest)
    return Snapshot(
        info.name,
        str(info.path),
        info.data_hash,
        manifest.class_order,
        manifest.class_names,
        len(manifest),
        splits.fingerprint,
    )
