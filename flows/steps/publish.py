"""Steps 3–4 of a backfill (docs/design.md §7.6): publish the re-embedded gallery as a new, verified index
version, then switch the live gallery to it in one lineage transaction.

:func:`publish` assembles the gallery (full, or mixed with the current one), builds the FAISS index in a fresh
``live/index-vNNN`` and verifies it (count, finite vectors, manifest, checksum); an interrupted run reuses it.
:func:`switch` records the event and the new live pointer in one lineage transaction whose last act is the
atomic rename of ``live/CURRENT``; the old index serves until then and is kept until retention removes it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from components.errors import IndexIntegrityError, LineageError
from components.evaluation import gallery_metrics
from components.faults import crash_point
from components.indexing import MANIFEST_FILE, GalleryIndex
from components.indexing.gallery import GalleryEmbeddings, gallery_beside
from components.indexing.live import LiveGallery
from components.indexing.mixed import mix_galleries
from components.io import atomic_path, atomic_write_text, file_sha256
from flows.steps.corpus import check_index_recall, index_gallery
from flows.steps.reconcile import PUBLISHING, roll_forward
from flows.steps.reembed import BackfillPlan, current_stamps, gallery_model_checkpoint
from flows.steps.reembed_corpus import corpus_selection, publish_corpus
from registry.records import BackfillRecord, PointerRecord

__all__ = ["publish", "switch"]


def _assemble(plan: BackfillPlan) -> tuple[GalleryEmbeddings, np.ndarray]:
    """The new gallery (full, or the live one with the re-embedded items replaced) and its generation stamps."""
    current = GalleryEmbeddings.load(Path(plan.source_gallery))
    stamps = current_stamps(Path(plan.source_gallery), current, plan.source_generation).copy()
    parts = [GalleryEmbeddings.load(plan.chunk_path(i)) for i in range(plan.n_chunks)]
    pos = np.asarray(plan.positions, dtype=np.int64)
    z, emb, clipped, logits, ids = (
        np.concatenate([getattr(x, name) for x in parts]) for name in ("z", "emb", "clipped", "logits", "ids")
    )
    if not np.array_equal(ids, current.ids[pos]):
        raise IndexIntegrityError(
            f"backfill chunks in {plan.work_dir} do not match the plan's items; delete the folder and run the backfill "
            "again"
        )
    part = dataclasses.replace(
        parts[0], z=z, emb=emb, clipped=clipped, logits=logits, ids=ids, labels=current.labels[pos]
    )
    if plan.kind == "full":
        order = np.argsort(pos)
        full = dataclasses.replace(
            part,
            z=z[order],
            emb=emb[order],
            clipped=clipped[order],
            logits=logits[order],
            ids=current.ids,
            labels=current.labels,
        )
        return full, np.full(len(current), plan.target, dtype=np.int64)
    stamps[pos] = plan.target
    return mix_galleries(current, part, pos), stamps


def publish(plan: BackfillPlan) -> tuple[Path, dict[str, float]]:
    """Assemble, index and verify the new gallery in a fresh ``live/index-vNNN``. Returns (index dir, metrics).

    Idempotent: a version published by an earlier, interrupted run of this backfill is verified and reused.
    """
    ws = plan.workspace
    record = plan.work_dir / "published.json"
    if record.exists():
        done = json.loads(record.read_text())
        index = plan.workspace.home / done["index"]  # stored relative to the workspace (absolute before)
        GalleryIndex.load(index)  # still intact?
        return index, done["metrics"]
    gallery, stamps = _assemble(plan)
    live = LiveGallery(ws.live_dir)
    version = live.next_version_dir()
    staging = version.with_name(f".{version.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    gallery.save(staging / "gallery.npz")
    with atomic_path(staging / "stamps.npy") as tmp, open(tmp, "wb") as fh:
        np.save(fh, stamps)
    shutil.copy2(gallery_model_checkpoint(plan), staging / "gallery_model.pt")
    index = index_gallery(plan.params, gallery, generation=plan.target, compatible=[plan.target])
    index.save(staging / "index")
    # verify before anyone can see it: count, finite vectors, manifest and checksum (load checks them)
    check = GalleryIndex.load(staging / "index")
    if check.ntotal != len(gallery) or check.manifest.generation != plan.target:
        raise IndexIntegrityError(
            f"the new index holds {check.ntotal} vectors for generation {check.manifest.generation}, "
            f"expected {len(gallery)} for generation {plan.target}; the backfill stops before switching"
        )
    if corpus_selection(plan) is None:  # the evaluation split is the served gallery
        check_index_recall(plan.params, check, staging / "index")
        corpus = {}
    else:
        corpus = publish_corpus(plan, staging)
    staging.rename(version)
    # retrieval quality of the new live gallery for the target generation's queries
    if plan.kind == "full":
        queries = gallery  # embedded by the serving model itself (rescaled into the ζ₀ ball after a restart)
    else:
        queries = GalleryEmbeddings.load(Path(plan.target_checkpoint).parent / "gallery.npz")
    metrics = gallery_metrics(queries, gallery) if queries.incompatibility(gallery) is None else {}
    metrics["share_embedded_by_target"] = float((stamps == plan.target).mean())
    metrics.update(corpus)
    rel = (version / "index").relative_to(plan.workspace.home).as_posix()
    atomic_write_text(record, json.dumps({"index": rel, "metrics": metrics}))
    return version / "index", metrics


def _backfill_record(plan: BackfillPlan, index_dir: Path, metrics: dict[str, float]) -> BackfillRecord:
    started = datetime.fromisoformat(plan.started_at)
    return BackfillRecord(
        from_generation_id=plan.source_generation,
        to_generation_id=plan.target,
        kind=plan.kind,
        fraction=plan.fraction,
        order=plan.order,
        total=len(GalleryEmbeddings.load(Path(plan.source_gallery))),
        reembedded=len(plan.positions),
        index_path=str(index_dir),
        zeta_restarted=plan.restart_zeta,
        metrics={**metrics, "forced": plan.forced},
        started_at=started,
        duration_s=(datetime.now(UTC) - started).total_seconds(),
    )


def switch(plan: BackfillPlan, index_dir: Path, metrics: dict[str, float]) -> int:
    """Record the backfill and switch the live pointer atomically (one lineage transaction). Returns the event id."""
    p, ws = plan.params, plan.workspace
    live = LiveGallery(ws.live_dir)
    with ws.lineage(p) as store:
        tracking = ws.tracking(p)
        done = next((e for e in store.backfills() if e.index_path == str(index_dir)), None)
        if done is not None:  # a retry after the commit point: finish what follows it, record nothing twice
            roll_forward(ws, p, store)
            return int(done.id)
        cur = store.live_pointer()
        # a newer pointer row that only lets more generations query the same gallery is fine; another gallery is not
        if cur is None or gallery_beside(cur.index_path) != Path(plan.source_gallery):
            raise LineageError(
                "the live gallery changed while this backfill ran; delete backfills/in_progress and start again"
            )
        event = _backfill_record(plan, index_dir, metrics)
        model_ckpt = str(index_dir.parent / "gallery_model.pt")
        pointer = PointerRecord(
            plan.target,
            str(index_dir),
            f"{plan.kind} backfill with generation {plan.target}",
            model_ckpt,
            plan.zeta,
            [plan.target],
            model_sha256=file_sha256(model_ckpt),
            index_sha256=file_sha256(index_dir / MANIFEST_FILE),
        )
        retire = (
            [g.id for g in store.generations() if g.id < plan.target and g.status == "serving"]
            if plan.kind == "full"
            else []
        )
        version = store.generation(plan.target).mlflow_version
        # after a full backfill the live gallery answers the target's queries only: it becomes production
        promote = plan.kind == "full" and store.production_generation_id() != plan.target
        # lets a rerun recognise a committed event (the index, relative to the workspace)
        atomic_write_text(plan.work_dir / PUBLISHING, index_dir.relative_to(plan.workspace.home).as_posix())
        crash_point("backfill.before_sql")
        event_id = store.record_backfill(event, pointer, retire, promote=promote)  # the commit point
        crash_point("backfill.after_sql")
        roll_forward(ws, p, store)  # live/CURRENT, the gallery / production aliases, this backfill's folder
        if version is not None:
            tracking.set_tags(
                version,
                {"bctflow.gallery": f"live since backfill {event_id} ({plan.kind}, {len(plan.positions)} items)"},
            )
    live.prune(p.backfill.retain_versions)
    return event_id
