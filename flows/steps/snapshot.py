"""Step 1: select the generation's training data and snapshot its manifest with DVC."""

from __future__ import annotations

from flows.steps.context import load_splits
from flows.plan import GenerationPlan
from flows.steps.results import Snapshot
from components.data import resolve_class_order, select_training_data
from registry.data_snapshots import DataSnapshotStore

__all__ = ["snapshot_data"]


def snapshot_data(plan: GenerationPlan) -> Snapshot:
    """Select the generation's training data and snapshot its manifest with DVC."""
    p, ws = plan.p, plan.workspace
    splits = load_splits(p, ws)
    classes = "all" if plan.classes == "all" else list(plan.classes)
    order = resolve_class_order(classes, splits.train.num_classes, plan.parent.class_order if plan.parent else None)
    manifest = select_training_data(
        splits.train, dataset=splits.name, fingerprint=splits.fingerprint, class_order=order, fraction=plan.fraction, seed=p.data.split_seed + plan.gen_id
    )
    info = DataSnapshotStore(ws.data_dir).snapshot(f"gen_{plan.gen_id:03d}", manifest)
    return Snapshot(info.name, str(info.path), info.data_hash, manifest.class_order, manifest.class_names, len(manifest))
