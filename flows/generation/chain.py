"""The generation chain declared in params.yaml (what `bctflow chain` and `dvc repro` reproduce).

In a fresh workspace the chain's generations get ids 0, 1, 2, … in order;
generation 0 embeds the gallery and stays live (no backfill inside a chain), so
every later generation aligns to it. :func:`declared_manifests` computes each
generation's data manifest from params alone — the `data` stage of dvc.yaml
writes them (docs/design.md §7.15), and `bctflow chain --expect-data` and each
generation's stage check the run used exactly those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.data import DataManifest
from components.io import atomic_write_text
from flows.gallery.data import load_splits, select_generation_data
from flows.params import Params
from flows.runtime.workspace import Workspace

__all__ = ["declared_manifests", "flat_metrics", "write_manifests"]


def declared_manifests(params: Params, ws: Workspace) -> dict[str, DataManifest]:
    chain = params.declared_chain()
    splits = load_splits(params, ws)
    out: dict[str, DataManifest] = {}
    live_order: tuple[int, ...] | None = None
    for gen_id, spec in enumerate(chain):
        m = select_generation_data(params, splits, gen_id, spec.classes, spec.fraction, live_order)
        out[spec.name] = m
        if live_order is None:
            live_order = m.class_order
    return out


def write_manifests(params: Params, ws: Workspace, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, m in declared_manifests(params, ws).items():
        path = out_dir / f"{name}.json"
        atomic_write_text(path, m.to_json())
        paths.append(path)
    return paths


def flat_metrics(lineage: list[dict[str, Any]]) -> dict[str, Any]:
    """The lineage's numbers as one flat mapping ``<generation>.<block>.<metric>`` (for `dvc metrics`)."""
    flat: dict[str, Any] = {}
    for g in lineage:
        m = g["metrics"]
        for block in ("self", "cross", "parent_self", "p_com", "p_up"):
            for k, v in (m.get(block) or {}).items():
                flat[f"{g['name']}.{block}.{k}"] = v
        flat[f"{g['name']}.zeta"] = g["zeta"]
        flat[f"{g['name']}.backfill_required"] = g["backfill_required"]
    return flat
