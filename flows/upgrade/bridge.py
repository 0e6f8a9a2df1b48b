"""Fit an upgrade route's bridge between two committed generations and measure what it serves (docs/design.md §11).

``bctflow upgrade --generation G --route adapter|transform [--from P]``: the bridge links G and P (default: G's
parent). An *adapter* maps G's queries into P's space, so the gallery P embedded keeps serving G's queries
(Drift-Adapter, EMNLP'25); a *transform* maps P's stored vectors into G's space (FCT, CVPR'22).

1. **Pairs, never from the test split.** ``ceil(upgrade.paired_fraction × live gallery rows)`` items, raised to what
   a map of the source's width needs (two per dimension, :func:`components.bridges.base.min_pairs`) and at most the
   whole split, drawn (seeded, ``upgrade.seed``) from the dataset's *training* split (:func:`paired_count`: the
   number and why), embedded by both generations' checkpoints (each proved to be the file the lineage recorded) into
   ``<home>/bridges/<role>-g<S>-g<T>/pairs-<sample>/g<N>/`` (resumable part stores, one folder per draw).
2. **Fit** the map ``upgrade.map`` (``upgrade.map_options``) from the source's fitting space to the target's
   (:meth:`components.bridges.base.Bridge.fit`; its held-out error on a fifth of the pairs).
3. **Measure on the labelled split**, with the generations' own evaluation galleries (no new embedding): the served
   M(route) — an adapter: M(bridge(φ_G), φ_P), G's queries carried into P's gallery; a transform: M(φ_G,
   bridge(φ_P)) — beside a full backfill's M(φ_G, φ_G), the old gallery's M(φ_P, φ_P) and the raw M(φ_G, φ_P);
   ``recovered``: the route's mAP over the full backfill's, and its CMC@10 over the full backfill's (Drift-Adapter's
   share of a full re-embed's Recall@10, on labelled data); and the map's microseconds per query (a batch of 1024,
   numpy on the CPU).
4. **Record**: the file (``<map>-v<k>.npz``, its sha256), an MLflow model version of ``<model>-bridges`` with the
   measurements in its run, then the lineage's bridge row (version k). A kill before the lineage row leaves a file
   and possibly an MLflow version the lineage never names; the same command fits and records the next.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from components.bridges.base import Bridge, check_map_options, fitting_space, min_pairs, us_per_query
from components.errors import CheckpointMismatchError, ConfigError
from components.evaluation.retrieval import gallery_metrics
from components.indexing.backend import gallery_facts
from components.indexing.gallery import GalleryEmbeddings
from components.indexing.parts import GalleryParts
from components.indexing.version import GalleryVersion
from components.io import file_sha256
from flows.gallery.data import GallerySource, load_splits
from flows.gallery.pipeline import embed_gallery
from flows.params import Params
from flows.runtime.workspace import Workspace
from registry.lineage import ROLES, LineageDB
from registry.orm import Generation
from registry.records import BridgeRecord
from registry.tracking.bridge_model import BridgeRegistration, register_bridge

__all__ = ["FittedRoute", "check_pairs", "fit_route", "paired_count", "paired_positions"]

#: the rank of Drift-Adapter's recovery metric: CMC@10 (a relevant item among the first 10), labelled-data Recall@10
RECALL_K = 10


@dataclass(frozen=True)
class FittedRoute:
    """A fitted and recorded bridge and what it serves on the labelled split. ``served`` / ``full`` / ``old``:
    ``{"map": …, "cmc@1": …, "cmc@10": …}`` of the route, of a full backfill (the new model on both sides) and of
    the old gallery (the parent on both sides); ``cross``: the new model's raw queries on the old gallery;
    ``recovered``: served mAP / full mAP; ``us_per_query``: the map alone."""

    role: str
    source: int
    target: int
    kind: str
    version: int
    path: str
    sha256: str
    sample: int
    fit_error: float
    mlflow_version: str | None
    served: dict[str, float] = field(default_factory=dict)
    full: dict[str, float] = field(default_factory=dict)
    old: dict[str, float] = field(default_factory=dict)
    #: the new generation's queries on the old gallery with no bridge: M(φ_G, φ_P) (the compatible route)
    cross: dict[str, float] = field(default_factory=dict)
    recovered: float | None = None
    us_per_query: float = 0.0
    seconds: float = 0.0
    #: the live gallery's rows (what the paired fraction was taken of, and what a route's cost is counted over)
    gallery_items: int = 0
    #: served CMC@10 / full CMC@10: Drift-Adapter's "share of a full re-embed's Recall@10" on labelled data
    recovered_recall10: float | None = None
    #: why the paired sample holds ``sample`` items (:func:`paired_count`)
    sample_why: str = ""


def paired_count(train_items: int, gallery_rows: int, fraction: float, width: int) -> tuple[int, str]:
    """(how many paired items a bridge of ``width``-wide source vectors is fitted on, why): ``ceil(fraction ×
    gallery_rows)``, raised to the map's two per dimension (:func:`min_pairs`), at most the training split's
    ``train_items``. ConfigError in one line when the training split holds fewer than the map needs."""
    need = min_pairs(width)
    if train_items < need:
        raise ConfigError(
            f"a bridge of {width}-wide vectors needs at least {need} paired items (2 per dimension) from the training "
            f"split, which holds {train_items:,}; give the dataset a larger training split (data.test_fraction, "
            "data.max_train_per_class)"
        )
    share = max(1, math.ceil(fraction * gallery_rows))
    of = f"upgrade.paired_fraction {fraction:g} of the {gallery_rows:,}-item live gallery"
    if share < need:
        return need, f"2 per dimension of the {width}-wide map — {of} would be {share:,}"
    if share > train_items:
        return train_items, f"the whole training split — {of} would be {share:,}"
    return share, of


def paired_positions(train_items: int, n: int, seed: int) -> np.ndarray:
    """The positions of ``n`` items of the training split ((n,) int64, ascending; at most the whole split), drawn
    without replacement with ``seed``."""
    n = min(train_items, max(1, n))
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(train_items, size=n, replace=False)).astype(np.int64)


def check_pairs(pairs: np.ndarray, labelled: np.ndarray) -> None:
    """Refuse a paired sample (item ids (n,)) holding items of the labelled split that measures the route (ids (m,)):
    a map fitted on them would be measured on what it was fitted to."""
    leak = np.intersect1d(pairs, labelled)
    if leak.size:
        shown = ", ".join(str(int(i)) for i in leak[:3]) + (", …" if leak.size > 3 else "")
        raise ConfigError(
            f"{leak.size} of the {len(pairs)} paired items are in the labelled test split that measures the route (ids "
            f"{shown}); pairs come from the training split only — give the dataset's train and test splits disjoint "
            "items and ids"
        )


def _generations(store: LineageDB, generation: int, parent: int | None) -> tuple[Generation, Generation]:
    """(new, old): generation ``generation`` and the earlier one it is bridged with; one line when there is none."""
    new = store.generation(generation)
    old_id = new.parent_id if parent is None else parent
    if old_id is None:
        raise ConfigError(f"generation {generation} has no parent to bridge to; pass --from with an earlier generation")
    if old_id >= generation:
        raise ConfigError(
            f"--from {old_id} is not earlier than generation {generation}; a route bridges a generation and an "
            "earlier one"
        )
    return new, store.generation(old_id)


def _checkpoint(g: Generation) -> Path:
    """Generation ``g``'s checkpoint, once its bytes proved to be the ones the lineage recorded."""
    ckpt = Path(g.checkpoint_path)
    if not ckpt.is_file():
        raise CheckpointMismatchError(
            f"generation {g.id}'s checkpoint {ckpt} is missing; restore it from a backup (a bridge needs both models)"
        )
    if g.checkpoint_sha256 is not None and file_sha256(ckpt) != g.checkpoint_sha256:
        raise CheckpointMismatchError(
            f"generation {g.id}'s checkpoint {ckpt} is not the file the lineage recorded (sha256 differs); restore "
            "it from a backup"
        )
    return ckpt


def _gallery_rows(store: LineageDB, fallback: int) -> int:
    """The live gallery's rows (``fallback``, the labelled split's size, before there is one)."""
    ptr = store.live_pointer()
    if ptr is None:
        return fallback
    return sum(gallery_facts(GalleryVersion.serving_index_of(ptr.index_path)).rows_by_generation.values())


def _evaluation_gallery(ws: Workspace, g: Generation) -> GalleryEmbeddings:
    return GalleryParts(GalleryVersion(ws.generation_dir(g.id)).evaluation_store).embeddings()


def _pairs(p: Params, source: GallerySource, positions: np.ndarray, g: Generation, work: Path) -> GalleryEmbeddings:
    """The paired items embedded by generation ``g``: a part store under ``work`` named by the sample (the sha256 of
    its positions: another draw never resumes this one's parts), kept for a rerun."""
    sample = hashlib.sha256(np.ascontiguousarray(positions, dtype=np.int64).tobytes()).hexdigest()[:12]
    out = work / f"pairs-{sample}" / f"g{g.id}"
    done = embed_gallery(p, source, _checkpoint(g), out, generation=g.id, positions=positions, crash_points=False)
    return done.store.embeddings()


def _measure(p: Params, bridge: Bridge, role: str, new: GalleryEmbeddings, old: GalleryEmbeddings) -> dict:
    """What the route serves on the labelled split (``new`` / ``old``: the two generations' evaluation galleries):
    ``served``, ``full`` (a full backfill), ``old`` (the old gallery alone), ``cross`` (the new model's queries on
    the old gallery, no bridge), each ``{"map", "cmc@1", "cmc@10"}``."""

    def metrics(q: GalleryEmbeddings, g: GalleryEmbeddings) -> dict[str, float]:
        m = gallery_metrics(q, g, (1, RECALL_K), p.evaluation.chunk_size)
        return {k: float(m[k]) for k in ("map", "cmc@1", f"cmc@{RECALL_K}")}

    served = metrics(bridge.map_gallery(new), old) if role == "adapter" else metrics(new, bridge.map_gallery(old))
    cross = metrics(new, old) if new.emb.shape[1] == old.emb.shape[1] else {}  # other widths: no raw search
    return {"served": served, "full": metrics(new, new), "old": metrics(old, old), "cross": cross}


def _record(p: Params, ws: Workspace, store: LineageDB, bridge: Bridge, role: str, run_id: str | None,
            measured: dict) -> tuple[Path, str, str, int]:  # fmt: skip
    """Save the bridge as the next version of its (source, target, role), register it in MLflow with ``measured``
    (flattened: ``served_map`` …), then record it in the lineage: (path, sha256, MLflow version, version)."""
    key = (bridge.source, bridge.target, role)
    version = 1 + max((b.version for b in store.bridges()
                       if (b.from_generation_id, b.to_generation_id, b.role) == key), default=0)  # fmt: skip
    path = ws.home / "bridges" / f"{role}-g{bridge.source}-g{bridge.target}" / f"{bridge.kind}-v{version}.npz"
    sha = bridge.save(path)
    flat = {f"{side}_{k}": v for side, m in measured.items() if isinstance(m, dict) for k, v in m.items()}
    flat |= {k: v for k, v in measured.items() if isinstance(v, float)}
    reg = BridgeRegistration(path, sha, bridge.source, bridge.target, role, bridge.kind, bridge.sample,
                             bridge.fit_error, generation_run_id=run_id, metrics=flat)  # fmt: skip
    mlflow_version = register_bridge(ws.tracking(p), reg)
    row = store.record_bridge(BridgeRecord(bridge.source, bridge.target, role, bridge.kind, str(path), sha,
                                           bridge.sample, bridge.fit_error, mlflow_version))  # fmt: skip
    return path, sha, mlflow_version, row.version


def fit_route(params: Params, ws: Workspace, *, generation: int, role: str, parent: int | None = None) -> FittedRoute:
    """Fit, measure and record the ``role`` bridge between ``generation`` and ``parent`` (default: its parent) —
    the module docstring's four steps. ConfigError / CheckpointMismatchError / LineageError with one line, nothing
    recorded, when refused."""
    if role not in ROLES:  # the lineage's bridge roles: the routes a bridge serves
        raise ConfigError(f"--route {role!r} is not a bridge's route; use one of {', '.join(ROLES)}")
    options = check_map_options(params.upgrade.map, params.upgrade.map_options)
    t0 = time.perf_counter()
    with ws.lineage(params) as store:
        new, old = _generations(store, generation, parent)
        if new.geometry != old.geometry:
            raise ConfigError(
                f"generation {new.id} is {new.geometry} and generation {old.id} {old.geometry}; a bridge maps within "
                "one geometry — re-embed the gallery (bctflow backfill) instead"
            )
        src, tgt = (new, old) if role == "adapter" else (old, new)
        labelled = {g.id: _evaluation_gallery(ws, g) for g in (new, old)}
        train = load_splits(params, ws).train
        rows = _gallery_rows(store, len(labelled[new.id]))
        width = fitting_space(labelled[src.id]).shape[1]
        n, why = paired_count(len(train), rows, params.upgrade.paired_fraction, width)
        positions = paired_positions(len(train), n, params.upgrade.seed)
        check_pairs(train.ids[positions], labelled[new.id].ids)  # never the split the route is measured on
        work = ws.home / "bridges" / f"{role}-g{src.id}-g{tgt.id}"
        source = GallerySource("train", train, 0)
        x, y = (_pairs(params, source, positions, g, work) for g in (src, tgt))
        bridge = Bridge.fit(params.upgrade.map, src.id, tgt.id, x, y, params.upgrade.seed, **options)
        m = _measure(params, bridge, role, labelled[new.id], labelled[old.id])
        m["recovered_map"] = m["served"]["map"] / m["full"]["map"] if m["full"].get("map") else None
        hit = f"cmc@{RECALL_K}"
        m[f"recovered_{hit}"] = m["served"][hit] / m["full"][hit] if m["full"].get(hit) else None
        m["us_per_query"] = us_per_query(bridge.map_vectors, fitting_space(labelled[src.id]))  # a batch of 1024
        path, sha, mlflow_version, version = _record(params, ws, store, bridge, role, new.mlflow_run_id, m)
    return FittedRoute(
        role, src.id, tgt.id, bridge.kind, version, str(path), sha, bridge.sample, bridge.fit_error, mlflow_version,
        m["served"], m["full"], m["old"], m["cross"], m["recovered_map"], m["us_per_query"], time.perf_counter() - t0,
        rows, m[f"recovered_{hit}"], why,
    )  # fmt: skip
