"""One generation stage of the DVC pipeline: its workspace before the run, its checks and its results after it
(docs/design.md §7.15).

A stage starts from an empty ``outputs/<name>/workspace`` (DVC removes a stage's outputs before it runs it), copies
its parent stage's workspace into it — a workspace is self-contained and relocatable, so the copy is a workspace of
its own and the parent's output is only read — runs the generation there, checks that it trained on exactly the
manifest of the ``data`` stage, and writes ``results/<name>/``: ``metrics.json`` (``dvc metrics``),
``training.csv`` (per-epoch loss and accuracy) and ``compatibility.json`` (the compatibility matrix as rows, for the
heatmap of ``.dvc/plots/compatibility.json``) — data DVC draws with Vega-Lite, which its HTML page loads from a CDN —
and the same two views as PNG images, ``training.png`` and ``compatibility.png`` (the pictures the generation's
MLflow run holds, components/evaluation/plots.py), which ``dvc plots show`` shows with no network.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.errors import ConfigError
from components.io import atomic_write_bytes, atomic_write_text
from flows.params import Params, apply_overrides
from flows.runtime.artifacts import fmt
from flows.runtime.workspace import Workspace, resolve_home

__all__ = [
    "PNG_PLOTS",
    "compatibility_rows",
    "generation_metrics",
    "plot_images",
    "prepare_workspace",
    "stage_params",
    "training_csv",
    "used_manifest",
    "write_results",
]

#: what a workspace holds only while a command runs: not copied into the next generation's workspace
TRANSIENT = ("prefect", ".lock", "staging", "jobs")
#: the lineage's metric blocks a generation's metrics.json carries
BLOCKS = ("self", "cross", "parent_self", "p_com", "p_up")
#: the images each stage writes beside its data: DVC image plots, shown offline (flows/pipeline/dvc_yaml.py declares
#: them)
PNG_PLOTS = ("training.png", "compatibility.png")
#: the metric of the compatibility heatmap (the one ``metrics.json`` summarises as ``compatibility_map``)
HEATMAP_METRIC = "map"


def stage_params(params: Params) -> Params:
    """``params`` as a stage runs them: stores in the stage's own workspace only, datasets and Prefect's temporary
    server state kept in the default workspace (``$BCTFLOW_HOME`` or ``./.bctflow``), outside every DVC output.
    ``data.root`` shapes nothing (its dataset fingerprint does), so the params digest is unchanged."""
    if params.lineage.db_url is not None or params.tracking.mlflow_uri is not None:
        raise ConfigError(
            "a DVC stage keeps the generation's lineage and MLflow store in its own workspace (a DVC output); "
            "params.yaml lineage.db_url and tracking.mlflow_uri must be null for `dvc repro`"
        )
    shared = resolve_home(None)
    if "PREFECT_API_URL" not in os.environ:
        os.environ.setdefault("PREFECT_HOME", str(shared / "prefect"))
    if params.data.root is None:
        params = apply_overrides(params, {"data.root": str(shared / "datasets")})
    return params


def prepare_workspace(home: Path, parent: Path | None, params: Params, expected: list[str]) -> None:
    """Make ``home`` the stage's workspace: empty, or a copy of ``parent`` (a workspace whose lineage holds exactly
    the generations ``expected``, in order). ConfigError when ``home`` is not empty or the parent is not that."""
    if home.exists() and any(home.iterdir()):
        raise ConfigError(
            f"{home} is not empty; a stage starts from an empty workspace (DVC removes it before running the stage): "
            "run `dvc repro`, or delete the folder"
        )
    if parent is None:
        return
    if not parent.is_dir():
        raise ConfigError(f"the parent workspace {parent} does not exist; run `dvc repro` (its stage makes it)")
    if home.exists():
        home.rmdir()
    shutil.copytree(parent, home, symlinks=True, ignore=lambda _d, names: [n for n in names if n in TRANSIENT])
    with Workspace(home).lineage(params, readonly=True) as store:
        found = [g.name for g in store.generations()]
    if found != expected:
        shutil.rmtree(home)
        raise ConfigError(
            f"the parent workspace {parent} holds generations {found}, not {expected} (the chain params.yaml declares "
            "before this one); run `dvc repro` to rebuild it"
        )


def used_manifest(home: Path, gen_id: int) -> str:
    """The text of the data manifest generation ``gen_id`` of the workspace trained on (its DVC snapshot)."""
    from registry.data_snapshots import DataSnapshots

    return DataSnapshots(Workspace(home).data_dir).load(f"gen_{gen_id:03d}").to_json()


def generation_metrics(entry: dict[str, Any]) -> dict[str, Any]:
    """A lineage entry's numbers for ``dvc metrics``: self / cross / parent_self mAP and CMC@k, P_com and P_up per
    metric, ζ, whether it needs a backfill, whether it is compatible with the live gallery, and AC / AA / ACA of the
    mAP compatibility matrix (values that do not apply are left out, not written as null)."""
    out: dict[str, Any] = {"zeta": entry["zeta"], "backfill_required": bool(entry["backfill_required"])}
    out["compatible_with_live"] = bool(entry["compatible_with_live"])
    metrics = entry["metrics"]
    for block in BLOCKS:
        values = {k: v for k, v in (metrics.get(block) or {}).items() if v is not None}
        if values:
            out[block] = values
    summary = {k: v for k, v in (entry["compatibility"].get("map") or {}).items() if k in ("ac", "aa", "aca")}
    if any(v is not None for v in summary.values()):
        out["compatibility_map"] = {k: v for k, v in summary.items() if v is not None}
    return out


def compatibility_rows(compatibility: dict[str, Any], names: dict[int, str]) -> list[dict[str, Any]]:
    """The compatibility matrices (metric → generations, matrix: C[t][k] = M(queries of t, gallery of k)) as rows
    ``{query, gallery, metric, value}``; pairs never measured are left out."""
    rows = []
    for metric, block in compatibility.items():
        ids = block["generations"]
        for i, row in enumerate(block["matrix"]):
            for j, value in enumerate(row):
                if value is not None:
                    rows.append({"query": names[ids[i]], "gallery": names[ids[j]], "metric": metric, "value": value})
    return rows


def training_csv(history: list[dict[str, float]]) -> str:
    """Per-epoch training records as CSV: ``epoch`` (an integer) first, then the other columns, sorted."""
    columns = ["epoch", *sorted({k for rec in history for k in rec} - {"epoch"})]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for n, rec in enumerate(history, start=1):
        writer.writerow({**rec, "epoch": int(rec.get("epoch", n))})
    return buf.getvalue()


def _png(draw: Callable[[Path], Path], out: Path) -> bytes:
    """The bytes of the PNG ``draw`` saves (matplotlib names the format by the file's suffix, so it draws into a
    temporary folder in ``out``; the caller writes the bytes atomically)."""
    with tempfile.TemporaryDirectory(dir=out, prefix=".plot-") as tmp:
        return draw(Path(tmp) / "plot.png").read_bytes()


def plot_images(
    name: str, history: list[dict[str, float]], compatibility: dict[str, Any], names: dict[int, str], out: Path
) -> dict[str, bytes]:
    """:data:`PNG_PLOTS` of generation ``name``: its training curves and the compatibility heatmap as of it (mAP)."""
    from components.evaluation.plots import compat_heatmap, training_curves

    block = compatibility[HEATMAP_METRIC]
    labels = [names[i] for i in block["generations"]]
    title = (
        f"compatibility ({HEATMAP_METRIC}) as of {name}\n"
        f"AC {fmt(block['ac'], 3)}, AA {fmt(block['aa'], 3)}, ACA {fmt(block['aca'], 3)}"
    )
    return {
        "training.png": _png(lambda p: training_curves(p, history, f"generation {name}: training per epoch"), out),
        "compatibility.png": _png(lambda p: compat_heatmap(p, block["matrix"], labels, title), out),
    }


def write_results(params: Params, home: Path, name: str, out: Path) -> list[Path]:
    """``metrics.json``, ``training.csv``, ``compatibility.json`` and :data:`PNG_PLOTS` of generation ``name`` of the
    workspace ``home``, written into ``out``; their paths."""
    from components.models.checkpoint import load_torch_safe

    with Workspace(home).lineage(params, readonly=True) as store:
        lineage = store.to_json()
    entry = next(g for g in lineage if g["name"] == name)
    names = {g["id"]: g["name"] for g in lineage}
    history = list(load_torch_safe(Path(entry["checkpoint"]))["history"])
    texts = {
        "metrics.json": json.dumps(generation_metrics(entry), indent=2) + "\n",
        "training.csv": training_csv(history),
        "compatibility.json": json.dumps(compatibility_rows(entry["compatibility"], names), indent=2) + "\n",
    }
    out.mkdir(parents=True, exist_ok=True)
    images = plot_images(name, history, entry["compatibility"], names, out)
    for file, text in texts.items():
        atomic_write_text(out / file, text)
    for file, data in images.items():
        atomic_write_bytes(out / file, data)
    return [out / f for f in (*texts, *images)]
