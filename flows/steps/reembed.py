"""Backfill: re-embed the gallery with a generation into a new index version and switch to it.

docs/design.md §7. The work happens in ``<home>/backfills/in_progress/``:

1. :func:`plan_backfill` fixes the target generation, the items to re-embed and
   their order (full: all; partial: a fraction, highest hyperbolic uncertainty
   first, random or oldest). It writes nothing; :func:`start` (under the
   workspace lock) saves it as ``plan.json``, or resumes the unfinished backfill
   that asked for the same thing, and refuses a different request while one is
   unfinished.
2. :func:`embed_chunks` embeds the items chunk by chunk; each chunk is a file
   written atomically, so a killed process loses at most the chunk in flight.
3. :func:`publish` assembles the gallery (full, or mixed with the current one),
   builds the FAISS index in a fresh ``live/index-vNNN`` and verifies it (count,
   finite vectors, manifest, checksum).
4. :func:`switch` records the event and the new live pointer in one lineage
   transaction whose last act is the atomic rename of ``live/CURRENT``. The old
   index serves until then and is kept until retention removes it.

A full backfill with ``backfill.restart_zeta`` rescales the target generation's
embeddings into the ζ₀ ball (z ← z·ζ₀/ζ_g, a copy of its checkpoint with
``tangent_scale``), so the chain that follows restarts at ζ₀ + Δζ; older
generations retire from compatibility duties.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from components.errors import ConfigError, IndexIntegrityError, LineageError
from components.evaluation import gallery_metrics
from components.indexing import GalleryIndex
from components.indexing.gallery import GalleryEmbeddings, gallery_beside
from components.indexing.live import LiveGallery
from components.indexing.mixed import ORDERS, backfill_order, mix_galleries
from components.io import atomic_path, atomic_write_text
from components.models import load_model, save_model
from components.training import embed_images
from flows.params import Params
from flows.steps.commit import PRODUCTION_ALIAS
from flows.steps.context import load_splits
from flows.workspace import Workspace
from registry.lineage import LineageStore
from registry.records import BackfillRecord, PointerRecord

__all__ = ["IN_PROGRESS", "BackfillPlan", "embed_chunks", "plan_backfill", "publish", "start", "switch"]

IN_PROGRESS = "in_progress"


class BackfillPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    home: str
    params: Params
    target: int
    target_checkpoint: str
    source_generation: int
    source_pointer_version: int
    source_gallery: str
    kind: str
    fraction: float
    order: str
    seed: int
    chunk_size: int
    throttle_s: float
    restart_zeta: bool
    zeta: float | None
    positions: list[int]
    started_at: str
    forced: bool = False

    @property
    def workspace(self) -> Workspace:
        return Workspace(Path(self.home))

    @property
    def work_dir(self) -> Path:
        return self.workspace.backfills_dir / IN_PROGRESS

    def chunk_path(self, i: int) -> Path:
        return self.work_dir / "chunks" / f"chunk_{i:05d}.npz"

    @property
    def n_chunks(self) -> int:
        return (len(self.positions) + self.chunk_size - 1) // self.chunk_size

    def same_request(self, other: BackfillPlan) -> bool:
        keys = ("target", "source_gallery", "kind", "fraction", "order", "seed", "chunk_size", "forced")
        return all(getattr(self, k) == getattr(other, k) for k in keys)


def _stamps_path(gallery: Path) -> Path:
    return gallery.parent / "stamps.npy"


def current_stamps(gallery_path: Path, gallery: GalleryEmbeddings, generation: int) -> np.ndarray:
    """Per-item generation of the live gallery's vectors (all the live generation's unless a partial backfill mixed them)."""
    path = _stamps_path(gallery_path)
    return np.load(path) if path.exists() else np.full(len(gallery), generation, dtype=np.int64)


def plan_backfill(
    params: Params,
    ws: Workspace,
    *,
    target: int | None = None,
    fraction: float = 1.0,
    order: str | None = None,
    seed: int = 0,
    force: bool = False,
) -> BackfillPlan:
    """Decide what to re-embed (writes nothing; :func:`start` saves or resumes it).

    A partial backfill mixes the target's vectors with the live gallery's, which is only
    meaningful when the target's queries passed the compatibility criterion against it;
    ``force`` lets an operator override that (recorded with the event).
    """
    b = params.backfill
    order = order or b.order
    if order not in ORDERS:
        raise ConfigError(f"unknown backfill order {order!r}; use one of {', '.join(ORDERS)}")
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"--fraction must be in (0, 1] (got {fraction}); 1 re-embeds the whole gallery")
    store = ws.lineage(params, readonly=True)
    try:
        return _plan(params, ws, store, target, fraction, order, seed, force)
    finally:
        store.close()


def _plan(
    params: Params,
    ws: Workspace,
    store: LineageStore,
    target: int | None,
    fraction: float,
    order: str,
    seed: int,
    force: bool,
) -> BackfillPlan:
    ptr = store.live_pointer()
    if ptr is None:
        raise LineageError("there is no live gallery yet; create generation 0 first (bctflow run)")
    if target is None:
        target = store.production_generation_id()
        if target is None:
            raise LineageError("no generation is promoted; name one: bctflow backfill --generation N")
    g = store.generation(target)
    if g.status == "retired":
        raise ConfigError(f"generation {target} is retired; backfill with a serving generation")
    kind = "full" if fraction >= 1.0 else "partial"
    live_gen = store.generation(ptr.generation_id)
    source = gallery_beside(ptr.index_path)
    current = GalleryEmbeddings.load(source)
    if kind == "partial":
        accepted = ptr.compatible_generations or [ptr.generation_id]
        if target not in accepted and not force:
            raise ConfigError(
                f"a partial backfill mixes generation {target}'s vectors with the live gallery's, but generation {target}'s queries are not "
                f"compatible with it (the live gallery accepts {accepted}); run a full backfill (--fraction 1), or --force to mix anyway"
            )
        if (g.geometry, g.embed_dim) != (live_gen.geometry, live_gen.embed_dim):
            raise ConfigError(
                f"generation {target} ({g.geometry}, d={g.embed_dim}) cannot share an index with the live gallery "
                f"({live_gen.geometry}, d={live_gen.embed_dim}); run a full backfill (--fraction 1)"
            )
        ordered = backfill_order(current, order, seed, current_stamps(source, current, ptr.generation_id))
        positions = ordered[: int(round(fraction * len(current)))].tolist()
    else:
        positions = list(range(len(current)))
    restart = bool(params.backfill.restart_zeta and kind == "full" and g.geometry == "lorentz" and g.zeta is not None)
    return BackfillPlan(
        home=str(ws.home),
        params=params,
        target=target,
        target_checkpoint=g.checkpoint_path,
        source_generation=ptr.generation_id,
        source_pointer_version=ptr.id,
        source_gallery=str(source),
        kind=kind,
        fraction=float(fraction),
        order=order if kind == "partial" else "all",
        seed=seed,
        chunk_size=params.backfill.chunk_size,
        throttle_s=params.backfill.throttle_seconds,
        restart_zeta=restart,
        zeta=params.geometry.zeta0 if restart else g.zeta,
        positions=positions,
        started_at=datetime.now(UTC).isoformat(),
        forced=bool(force and kind == "partial"),
    )


def start(plan: BackfillPlan) -> BackfillPlan:
    """Save the plan, or resume the unfinished backfill that asked for the same thing (its selection and start time)."""
    saved = plan.work_dir / "plan.json"
    if saved.exists():
        prev = BackfillPlan.model_validate_json(saved.read_text())
        if not prev.same_request(plan):
            raise LineageError(
                f"another backfill (generation {prev.target}, {prev.kind}, fraction {prev.fraction}, order {prev.order}) is unfinished in "
                f"{plan.work_dir}; rerun that command to finish it, or delete the folder to abandon it"
            )
        return prev
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(saved, plan.model_dump_json())
    return plan


def _gallery_model_checkpoint(plan: BackfillPlan) -> Path:
    """The model that embeds the new gallery: the target, or its copy rescaled into the ζ₀ ball."""
    if not plan.restart_zeta:
        return Path(plan.target_checkpoint)
    path = plan.work_dir / "gallery_model.pt"
    if not path.exists():
        model = load_model(Path(plan.target_checkpoint))
        spec = model.spec
        assert spec.zeta is not None and plan.zeta is not None
        scaled = dataclasses.replace(spec, zeta=plan.zeta, tangent_scale=spec.tangent_scale * plan.zeta / spec.zeta)
        rescaled = type(model)(scaled)
        rescaled.load_state_dict(model.state_dict())
        save_model(rescaled, path)
    return path


def embed_chunks(plan: BackfillPlan, on_chunk: Callable[[int, int, bool], None] | None = None) -> tuple[int, int]:
    """Embed every chunk not on disk yet. Returns (chunks already done before this call, chunks in total)."""
    p = plan.params
    test = load_splits(p, plan.workspace).test
    model = None
    done_before = 0
    for i in range(plan.n_chunks):
        path = plan.chunk_path(i)
        if path.exists():
            done_before += 1
            if on_chunk:
                on_chunk(i, plan.n_chunks, True)
            continue
        if model is None:
            model = load_model(_gallery_model_checkpoint(plan))
        pos = np.asarray(plan.positions[i * plan.chunk_size : (i + 1) * plan.chunk_size], dtype=np.int64)
        emb = embed_images(model, test.images[pos], batch_size=p.train.eval_batch_size, device=p.train.device)
        part = GalleryEmbeddings.from_embeddings(
            emb, model.spec, float(model.curvature), test.ids[pos], test.labels[pos]
        )
        part.save(path)
        if on_chunk:
            on_chunk(i, plan.n_chunks, False)
        if plan.throttle_s:
            time.sleep(plan.throttle_s)
    return done_before, plan.n_chunks


def _assemble(plan: BackfillPlan) -> tuple[GalleryEmbeddings, np.ndarray]:
    """The new gallery (full, or the live one with the re-embedded items replaced) and its generation stamps."""
    current = GalleryEmbeddings.load(Path(plan.source_gallery))
    stamps = current_stamps(Path(plan.source_gallery), current, plan.source_generation).copy()
    parts = [GalleryEmbeddings.load(plan.chunk_path(i)) for i in range(plan.n_chunks)]
    pos = np.asarray(plan.positions, dtype=np.int64)
    cat = lambda name: np.concatenate([getattr(x, name) for x in parts])
    z, emb, clipped, logits, ids = cat("z"), cat("emb"), cat("clipped"), cat("logits"), cat("ids")
    if not np.array_equal(ids, current.ids[pos]):
        raise IndexIntegrityError(
            f"backfill chunks in {plan.work_dir} do not match the plan's items; delete the folder and run the backfill again"
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
        GalleryIndex.load(Path(done["index"]))  # still intact?
        return Path(done["index"]), done["metrics"]
    gallery, stamps = _assemble(plan)
    live = LiveGallery(ws.live_dir)
    version = live.next_version_dir()
    staging = version.with_name(f".{version.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    gallery.save(staging / "gallery.npz")
    with atomic_path(staging / "stamps.npy") as tmp, open(tmp, "wb") as fh:
        np.save(fh, stamps)
    shutil.copy2(_gallery_model_checkpoint(plan), staging / "gallery_model.pt")
    index = GalleryIndex.build(
        gallery.vectors(),
        gallery.ids,
        geometry=gallery.retrieval_geometry,
        curvature=gallery.curvature,
        generation=plan.target,
        compatible_generations=[plan.target],
    )
    index.save(staging / "index")
    # verify before anyone can see it: count, finite vectors, manifest and checksum (load checks them)
    check = GalleryIndex.load(staging / "index")
    if check.ntotal != len(gallery) or check.manifest.generation != plan.target:
        raise IndexIntegrityError(
            f"the new index holds {check.ntotal} vectors for generation {check.manifest.generation}, "
            f"expected {len(gallery)} for generation {plan.target}; the backfill stops before switching"
        )
    staging.rename(version)
    # retrieval quality of the new live gallery for the target generation's queries
    if plan.kind == "full":
        queries = gallery  # embedded by the serving model itself (rescaled into the ζ₀ ball after a restart)
    else:
        queries = GalleryEmbeddings.load(Path(plan.target_checkpoint).parent / "gallery.npz")
    metrics = gallery_metrics(queries, gallery) if queries.incompatibility(gallery) is None else {}
    metrics["share_embedded_by_target"] = float((stamps == plan.target).mean())
    atomic_write_text(record, json.dumps({"index": str(version / "index"), "metrics": metrics}))
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
    store = ws.lineage(p)
    tracking = ws.tracking(p)
    live = LiveGallery(ws.live_dir)
    try:
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
        )
        retire = (
            [g.id for g in store.generations() if g.id < plan.target and g.status == "serving"]
            if plan.kind == "full"
            else []
        )
        version = store.generation(plan.target).mlflow_version
        # after a full backfill the live gallery answers the target's queries only: it becomes production
        promote = plan.kind == "full" and store.production_generation_id() != plan.target
        with contextlib.ExitStack() as undo:

            def flip() -> None:
                undo.callback(live.restore, live.pointer())
                live.switch(
                    index_dir,
                    generation=plan.target,
                    compatible_generations=pointer.compatible_generations,
                    model_checkpoint=model_ckpt,
                    zeta=plan.zeta,
                )
                if version is not None:
                    undo.callback(tracking.move_alias("gallery", version))
                    if promote:
                        undo.callback(tracking.move_alias(PRODUCTION_ALIAS, version))

            event_id = store.record_backfill(event, pointer, retire, before_commit=flip, promote=promote)
            undo.pop_all()
        if version is not None:
            tracking.set_tags(
                version,
                {"bctflow.gallery": f"live since backfill {event_id} ({plan.kind}, {len(plan.positions)} items)"},
            )
    finally:
        store.close()
    live.prune(p.backfill.retain_versions)
    plan.work_dir.rename(ws.backfills_dir / f"bf_{event_id:03d}")
    return event_id
