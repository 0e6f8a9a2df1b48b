"""Step 1: select the generation's training data and snapshot its manifest with DVC."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from components.data import DataManifest, DatasetSplits, resolve_class_order, select_training_data
from components.errors import DataError
from flows.params import Params
from flows.plan import GenerationPlan
from flows.steps.context import load_splits
from flows.steps.results import Snapshot
from registry.data_snapshots import DataSnapshotStore

__all__ = ["select_generation_data", "snapshot_data"]


def select_generation_data(
    params: Params,
    splits: DatasetSplits,
    gen_id: int,
    classes: Sequence[int] | Literal["all"],
    fraction: float,
    parent_order: Sequence[int] | None,
) -> DataManifest:
    """Generation ``gen_id``'s training data: its classes (the parent's first, in its order) and a seeded fraction."""
    order = resolve_class_order(classes, splits.train.num_classes, parent_order)
    return select_training_data(
        splits.train,
        dataset=splits.name,
        fingerprint=splits.fingerprint,
        class_order=order,
        fraction=fraction,
        seed=params.data.split_seed + gen_id,
    )


def snapshot_data(plan: GenerationPlan) -> Snapshot:
    """Select the generation's training data and snapshot its manifest with DVC."""
    ws = plan.workspace
    splits = load_splits(plan.params, ws)
    if plan.data_fingerprint is not None and splits.fingerprint != plan.data_fingerprint:
        raise DataError(
            f"dataset {splits.name} changed since this run was planned (its fingerprint differs); run the command again"
        )
    classes = "all" if plan.classes == "all" else list(plan.classes)
    manifest = select_generation_data(
        plan.params, splits, plan.gen_id, classes, plan.fraction, plan.parent.class_order if plan.parent else None
    )
    info = DataSnapshotStore(ws.data_dir).snapshot(f"gen_{plan.gen_id:03d}", manifest)
    return Snapshot(
        info.name,
        str(info.path),
        info.data_hash,
        manifest.class_order,
        manifest.class_names,
        len(manifest),
        splits.fingerprint,
    )
