"""Steps 3–4 of a backfill (docs/design.md §7.6): publish the re-embedded galleries as a new, verified gallery
version, then switch the live gallery to it in one lineage transaction.

:func:`publish` assembles each gallery the backfill keeps current — the evaluation gallery, and the serving corpus
when there is one — the same way (full: the re-embedded parts; partial: the live store with them swapped in, part
by part), builds and verifies its index (:func:`flows.gallery.pipeline.index_gallery`) in a fresh
``live/index-vNNN``, records which index serves and seals the version (:mod:`components.indexing.seal`: what its
switches check, computed once here); an interrupted run reuses it. :func:`switch` records the event and the new live
pointer (the seal's facts and sha256) in one lineage transaction whose last act is the atomic rename of
``live/CURRENT``; the old version serves until then and is kept until retention removes it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from components.errors import IndexIntegrityError, LineageError
from components.evaluation import gallery_metrics
from components.evaluation.served import served_maps
from components.faults import crash_point
from components.indexing.backend import SearchIndex, collection_at, open_index
from components.indexing.live import LivePointer
from components.indexing.parts import PartWriter, append_stores, link_store, mix_stores
from components.indexing.reader import PartReader
from components.indexing.seal import read_seal, seal_version
from components.indexing.version import GalleryVersion
from components.io import atomic_write_text, file_sha256
from flows.backfill.plan import BackfillGallery, BackfillPlan
from flows.backfill.reembedding import (
    gallery_model_checkpoint,
    gallery_source,
    live_store,
    own_evaluation,
    select_items,
)
from flows.gallery.pipeline import corpus_metrics, index_gallery
from flows.recovery.reconcile import PUBLISHING, roll_forward
from registry.records import BackfillRecord, PointerRecord

__all__ = ["publish", "switch"]


def _assemble(plan: BackfillPlan, gallery: BackfillGallery, out: Path) -> PartReader:
    """The new store of ``gallery`` in ``out``: the re-embedded parts (full; hard links), or the live store with
    those items swapped in, part by part (partial). Refused unless the parts hold exactly the selected items."""
    if not gallery.selected:  # an ingest's evaluation gallery: the live one, as it is
        link_store(live_store(plan, gallery).store, out)
        return PartReader(out)
    work = PartReader(plan.work_version.store(gallery.corpus))
    split = gallery_source(plan, gallery).split
    selected = split.ids[select_items(plan, gallery)]
    if not np.array_equal(np.sort(work.rows.ids), np.sort(selected)):
        raise IndexIntegrityError(
            f"the re-embedded parts in {work.path} do not hold the items this backfill selected; delete "
            f"{plan.work_dir} and run the backfill again"
        )
    if plan.kind == "full":
        link_store(work.store, out)
    elif plan.kind == "ingest":
        append_stores(live_store(plan, gallery).store, work.store, PartWriter(out, plan.chunk_size))
    else:
        mix_stores(live_store(plan, gallery).store, work.store, PartWriter(out, plan.chunk_size))
    store = PartReader(out)
    # generations are compared item by item on the evaluation split: its gallery keeps the split's order
    if not gallery.corpus and not np.array_equal(store.rows.ids, split.ids):
        raise IndexIntegrityError(
            f"the new evaluation gallery in {out} is not in the evaluation split's order; delete {plan.work_dir} and "
            "run the backfill again"
        )
    return store


def _measure(plan: BackfillPlan, gallery: BackfillGallery, store: PartReader, index: SearchIndex) -> dict[str, float]:
    """Retrieval of the new ``gallery``: the target's queries on the evaluation gallery (its own after a full
    backfill: embedded by the serving model, rescaled into the ζ₀ ball after a restart) — mAP, CMC@k and the served
    mAP@R under ``serve.merge`` (``served_map[_rank]``) —, the corpus's own labelled items on the corpus; and the
    share of it the target embedded."""
    mine = store.rows.stamped(plan.target)
    share = float(mine.mean())
    if gallery.corpus:
        return {
            **corpus_metrics(plan.params, store.store, index, seed=plan.seed),
            "corpus/share_embedded_by_target": share,
            "corpus/index_recall_at_10": float(index.manifest.recall_at_10 or 1.0),
        }
    new = store.embeddings()
    embedded = plan.kind == "full" and plan.bridge is None  # the gallery is the target's own embedding of the split
    queries = new if embedded else own_evaluation(plan)
    if queries.incompatibility(new) is not None:
        return {"share_embedded_by_target": share}
    # what the query service answers over it (serve.merge), as the backfill's plan predicted it
    old = queries if embedded else live_store(plan, gallery).embeddings()
    served = served_maps(old, queries, new, np.flatnonzero(mine), (plan.params.serve.merge,))
    return {**gallery_metrics(queries, new), **served, "share_embedded_by_target": share}


def publish(plan: BackfillPlan) -> tuple[Path, dict[str, float]]:
    """Assemble, index and verify every gallery of the backfill in a fresh ``live/index-vNNN``, record which index
    serves. Returns (the new version's evaluation index, metrics).

    Idempotent: a version published by an earlier, interrupted run of this backfill is verified and reused.
    """
    p, ws = plan.params, plan.workspace
    record = plan.work_dir / "published.json"
    if record.exists():
        done = json.loads(record.read_text())
        index = ws.home / done["index"]  # stored relative to the workspace (absolute before)
        open_index(index)  # still intact?
        try:
            read_seal(GalleryVersion.of_index(index))
        except IndexIntegrityError:  # published before seals, or its seal damaged: the version verified, sealed now
            seal_version(GalleryVersion.of_index(index))
        return index, done["metrics"]
    version_dir = LivePointer(ws.live_dir).next_version_dir()
    staging = version_dir.with_name(f".{version_dir.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    version = GalleryVersion(staging)
    serves_corpus = any(g.corpus for g in plan.galleries)
    metrics: dict[str, float] = {}
    for gallery in plan.galleries:  # verified before anyone can see them
        store = _assemble(plan, gallery, version.store(gallery.corpus))
        index = index_gallery(
            p,
            ws.home,
            store.store,
            version.index(gallery.corpus),
            generation=plan.target,
            version=GalleryVersion(version_dir).number,
            corpus=gallery.corpus,
            compatible=plan.accepts,
            serving=gallery.corpus == serves_corpus,
        )
        metrics.update(_measure(plan, gallery, store, index))
    shutil.copy2(gallery_model_checkpoint(plan), staging / "gallery_model.pt")
    version.record_serving(p.gallery.source)
    seal_version(version)  # what its switches will check, computed now that every gallery was read
    staging.rename(version_dir)
    rel = GalleryVersion(version_dir).evaluation_index.relative_to(ws.home).as_posix()
    atomic_write_text(record, json.dumps({"index": rel, "metrics": metrics}))
    return GalleryVersion(version_dir).evaluation_index, metrics


def _backfill_record(plan: BackfillPlan, index_dir: Path, metrics: dict[str, float]) -> BackfillRecord:
    started = datetime.fromisoformat(plan.started_at)
    return BackfillRecord(
        from_generation_id=plan.source_generation,
        to_generation_id=plan.target,
        kind=plan.event_kind,
        fraction=plan.fraction,
        order=plan.order,
        total=plan.evaluation.total,
        reembedded=plan.evaluation.selected,
        index_path=str(index_dir),
        zeta_restarted=plan.restart_zeta,
        metrics={**metrics, "forced": plan.forced, **_carried_by(plan)},
        started_at=started,
        duration_s=(datetime.now(UTC) - started).total_seconds(),
    )


def _carried_by(plan: BackfillPlan) -> dict[str, int | str]:
    """A gallery transform's bridge, as its backfill event names it (nothing for a re-embedding)."""
    b = plan.bridge
    return {} if b is None else {"bridge_id": b.id, "bridge_version": b.version, "bridge_sha256": b.sha256}


def switch(plan: BackfillPlan, index_dir: Path, metrics: dict[str, float]) -> int:
    """Record the backfill and switch the live pointer atomically (one lineage transaction). Returns the event id."""
    p, ws = plan.params, plan.workspace
    live = LivePointer(ws.live_dir)
    tracking = ws.tracking(p)
    # MLflow imported and its store opened before the transaction: the aliases follow the commit at once, and a query
    # service on the same cores sees no import's seconds of CPU between the switch and its reload
    tracking.prepare()
    with ws.lineage(p) as store:
        done = next((e for e in store.backfills() if e.index_path == str(index_dir)), None)
        if done is not None:  # a retry after the commit point: finish what follows it, record nothing twice
            roll_forward(ws, p, store)
            return int(done.id)
        cur = store.live_pointer()
        # a newer pointer row that only lets more generations query the same gallery is fine; another gallery is not
        if cur is None or Path(cur.index_path) != Path(plan.source_index):
            raise LineageError(
                "the live gallery changed while this backfill ran; delete backfills/in_progress and start again"
            )
        event = _backfill_record(plan, index_dir, metrics)
        model_ckpt = str(index_dir.parent / "gallery_model.pt")
        seal, seal_sha256 = read_seal(GalleryVersion.of_index(index_dir))  # the serving vectors' facts, sealed
        pointer = PointerRecord(
            plan.target,
            str(index_dir),
            plan.reason(),
            model_ckpt,
            plan.zeta,
            plan.accepts,
            model_sha256=file_sha256(model_ckpt),
            index_sha256=collection_at(index_dir).digest(),
            gallery_sha256=PartReader(GalleryVersion.of_index(index_dir).evaluation_gallery()).digest(),
            seal_sha256=seal_sha256,
            **asdict(seal.facts),
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
                {"bctflow.gallery": f"live since backfill {event_id} ({plan.kind}, {plan.evaluation.selected} items)"},
            )
    live.prune(p.gallery.keep_versions)
    return event_id
