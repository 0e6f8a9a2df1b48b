"""The generation chain declared in params.yaml (what `dvc repro` reproduces).

In a fresh workspace the chain's generations get ids 0, 1, 2, … in order;
generation 0 embeds the gallery and stays live (no backfill inside a chain), so
every later generation aligns to it. :func:`declared_manifests` computes each
generation's data manifest from params alone — the `data` stage of dvc.yaml
writes them, and `bctflow chain --expect-data` checks the run used exactly those.
"""

from __future__ import annotations

from pathlib import Path

from flows.params import Params
from flows.steps import load_splits
from flows.workspace import Workspace
from components.data import DataManifest, resolve_class_order, select_training_data
from components.errors import ConfigError

__all__ = ["declared_manifests"]


def declared_manifests(params: Params, ws: Workspace) -> dict[str, DataManifest]:
    if not params.generations:
        raise ConfigError("params.yaml declares no `generations:`; add the chain to reproduce (see README)")
    splits = load_splits(params, ws)
    out: dict[str, DataManifest] = {}
    live_order: tuple[int, ...] | None = None
    for gen_id, spec in enumerate(params.generations):
        order = resolve_class_order(spec.classes, splits.train.num_classes, live_order)
        m = select_training_data(
            splits.train, dataset=splits.name, fingerprint=splits.fingerprint, class_order=order,
            fraction=spec.fraction, seed=params.data.split_seed + gen_id,
        )
        out[spec.name] = m
        if live_order is None:
            live_order = m.class_order
    return out


def write_manifests(params: Params, ws: Workspace, out_dir: Path) -> list[Path]:
    from components.io import atomic_write_text

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, m in declared_manifests(params, ws).items():
        path = out_dir / f"{name}.json"
        atomic_write_text(path, m.to_json())
        paths.append(path)
    return paths
