"""Steps 1–2 of a backfill: plan (or resume) it, then re-embed the gallery with a generation in chunks.

docs/design.md §7. The work happens in ``<home>/backfills/in_progress/``:

1. :func:`plan_backfill` fixes the target generation, the items to re-embed and
   their order (full: all; partial: a fraction, highest hyperbolic uncertainty
   first, random or oldest). It writes nothing; :func:`start` (under the
   workspace lock) saves it as ``plan.json``, or resumes the unfinished backfill
   that asked for the same thing, and refuses a different request while one is
   unfinished.
2. :func:`embed_chunks` embeds the items chunk by chunk; each chunk is a file
   written atomically, so a killed process loses at most the chunk in flight.
3. and 4. :mod:`flows.steps.publish` publishes the new index version and switches
   the live gallery to it.

A full backfill with ``backfill.restart_zeta`` rescales the target generation's
embeddings into the ζ₀ ball (z ← z·ζ₀/ζ_g, a copy of its checkpoint with
``tangent_scale``), so the chain that follows restarts at ζ₀ + Δζ; older
generations retire from compatibility duties.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from components.errors import ConfigError, LineageError
from components.indexing.gallery import GalleryEmbeddings, gallery_beside
from components.indexing.mixed import ORDERS, backfill_order
from components.io import atomic_write_text
from components.models import load_model, save_model
from components.training import embed_split
from flows.data import load_splits
from flows.params import Params
from flows.workspace import Workspace
from registry.lineage import LineageStore
from registry.orm import GalleryPointer, Generation

__all__ = [
    "IN_PROGRESS",
    "BackfillPlan",
    "current_stamps",
    "embed_chunks",
    "gallery_model_checkpoint",
    "plan_backfill",
    "start",
]

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

    def source_in_workspace(self) -> str:
        """``source_gallery`` relative to the workspace (where it lies in it): the same in a copied workspace."""
        src, home = Path(self.source_gallery), Path(self.home)
        return src.relative_to(home).as_posix() if src.is_relative_to(home) else str(src)

    def same_request(self, other: BackfillPlan) -> bool:
        keys = ("target", "kind", "fraction", "order", "seed", "chunk_size", "forced")
        same_source = self.source_in_workspace() == other.source_in_workspace()
        return same_source and all(getattr(self, k) == getattr(other, k) for k in keys)


def _stamps_path(gallery: Path) -> Path:
    return gallery.parent / "stamps.npy"


def current_stamps(gallery_path: Path, gallery: GalleryEmbeddings, generation: int) -> np.ndarray:
    """Per-item generation (N,) of the live gallery's vectors: the live generation's, unless a partial
    backfill mixed them."""
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
    with ws.lineage(params, readonly=True) as store:
        return _plan(params, ws, store, target, fraction, order, seed, force)


def _check_partial(store: LineageStore, ptr: GalleryPointer, g: Generation, force: bool) -> None:
    """A partial backfill mixes ``g``'s vectors into the live gallery: they must share its space, and its queries
    must be accepted there (unless an operator forces it)."""
    accepted = ptr.compatible_generations or [ptr.generation_id]
    if g.id not in accepted and not force:
        raise ConfigError(
            f"a partial backfill mixes generation {g.id}'s vectors with the live gallery's, but generation {g.id}'s "
            f"queries are not compatible with it (the live gallery accepts {accepted}); run a full backfill "
            "(--fraction 1), or --force to mix anyway"
        )
    live = store.generation(ptr.generation_id)
    if (g.geometry, g.embed_dim) != (live.geometry, live.embed_dim):
        raise ConfigError(
            f"generation {g.id} ({g.geometry}, d={g.embed_dim}) cannot share an index with the live gallery "
            f"({live.geometry}, d={live.embed_dim}); run a full backfill (--fraction 1)"
        )


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
    source = gallery_beside(ptr.index_path)
    current = GalleryEmbeddings.load(source)
    if kind == "partial":
        _check_partial(store, ptr, g, force)
        ordered = backfill_order(current, order, seed, current_stamps(source, current, ptr.generation_id))
        positions = ordered[: round(fraction * len(current))].tolist()
        if not positions:
            raise ConfigError(
                f"--fraction {fraction} of the live gallery's {len(current)} items selects none; raise the fraction"
            )
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
    """Save the plan, or resume the unfinished backfill that asked for the same thing (its selection and start time;
    the paths are this workspace's, so a backfill copied with its workspace resumes in the copy)."""
    saved = plan.work_dir / "plan.json"
    if saved.exists():
        prev = BackfillPlan.model_validate_json(saved.read_text())
        if not prev.same_request(plan):
            raise LineageError(
                f"another backfill (generation {prev.target}, {prev.kind}, fraction {prev.fraction}, order "
                f"{prev.order}) is unfinished in "
                f"{plan.work_dir}; rerun that command to finish it, or delete the folder to abandon it"
            )
        return plan.model_copy(update={"positions": prev.positions, "started_at": prev.started_at})
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(saved, plan.model_dump_json())
    return plan


def gallery_model_checkpoint(plan: BackfillPlan) -> Path:
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
            model = load_model(gallery_model_checkpoint(plan))
        pos = np.asarray(plan.positions[i * plan.chunk_size : (i + 1) * plan.chunk_size], dtype=np.int64)
        emb, labels, ids = embed_split(
            model,
            test.subset(pos),
            batch_size=p.train.eval_batch_size,
            device=p.train.device,
            precision=p.train.precision,
        )
        part = GalleryEmbeddings.from_embeddings(emb, model.spec, float(model.curvature), ids, labels)
        part.save(path)
        if on_chunk:
            on_chunk(i, plan.n_chunks, False)
        if plan.throttle_s:
            time.sleep(plan.throttle_s)
    return done_before, plan.n_chunks
