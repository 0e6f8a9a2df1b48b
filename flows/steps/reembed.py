"""Steps 1–2 of a backfill: plan (or resume) it, then re-embed every gallery it keeps current (docs/design.md §7.6,
§7.10): the live version's evaluation gallery — always: the next generation is evaluated against it — and the
serving corpus of params ``gallery:``, through the same code, in ``<home>/backfills/in_progress/`` laid out as a
gallery version (:class:`~components.indexing.version.GalleryVersion`).

1. :func:`plan_backfill` fixes the target, kind, fraction, order and the galleries with their item counts, writing
   nothing; :func:`finished_backfill` says when it repeats the backfill that made the live gallery; :func:`start`
   (under the workspace lock) saves it as ``plan.json`` or resumes the unfinished backfill that asked for the same
   thing (a different request is refused), and fixes each gallery's items once (:func:`select_items`: all, or the
   fraction first in ``order`` — highest hyperbolic uncertainty, random, oldest stamps), saved in ``selection/``.
2. :func:`reembed` embeds each gallery's items through the one pipeline
   (:func:`flows.steps.gallery_pipeline.embed_gallery`) — or, a gallery transform, carries the live rows through a
   transform bridge (:mod:`flows.steps.transform`); a killed process keeps every finished part.
3. and 4. :mod:`flows.steps.publish` publishes the new, verified gallery version and switches the live gallery to it.

A full backfill with ``backfill.restart_zeta`` rescales the target's embeddings into the ζ₀ ball (z ← z·ζ₀/ζ_g, a
copy of its checkpoint with ``tangent_scale``), so the chain that follows restarts at ζ₀ + Δζ; older generations
retire from compatibility duties.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ValidationError

from components.errors import ConfigError, LineageError
from components.indexing.mixed import ORDERS
from components.indexing.store import GalleryStore
from components.indexing.version import GalleryVersion
from components.io import atomic_path, atomic_write_text
from components.models import load_model, save_model
from flows.cluster_spec import check_cluster
from flows.data import GallerySource, evaluation_source, open_corpus
from flows.params import Params
from flows.specs import gallery_store
from flows.steps.backfill_spec import IN_PROGRESS, BackfillGallery, BackfillPlan
from flows.steps.gallery_pipeline import Embedded, embed_gallery
from flows.steps.transform import check_fraction, plan_transform, transform_gallery
from flows.workspace import Workspace
from registry.lineage import LineageStore
from registry.orm import GalleryPointer, Generation

__all__ = [
    "IN_PROGRESS",
    "BackfillGallery",
    "BackfillPlan",
    "finished_backfill",
    "finished_dir",
    "gallery_model_checkpoint",
    "gallery_source",
    "live_store",
    "plan_backfill",
    "reembed",
    "select_items",
    "selected_positions",
    "start",
]


def finished_dir(ws: Workspace, event_id: int) -> Path:
    """Where a committed backfill's work folder is kept (its ``plan.json`` among its files)."""
    return ws.backfills_dir / f"bf_{event_id:03d}"


def _live_backfill(plan: BackfillPlan, store: LineageStore | None = None) -> tuple[int, BackfillPlan] | None:
    """(id, kept plan) of the committed backfill that published the live gallery ``plan`` replaces; None: the live
    gallery is a generation's own, or its backfill's record or work folder is gone (or an older bctflow wrote it).
    ``store``: an open lineage session to read it through (else one is opened for the call)."""
    with plan.workspace.session(plan.params, store, readonly=True) as lineage:
        event = next((e for e in lineage.backfills() if Path(e.index_path) == Path(plan.source_index)), None)
    if event is None:
        return None
    try:
        done = BackfillPlan.model_validate_json((finished_dir(plan.workspace, event.id) / "plan.json").read_text())
    except (OSError, ValidationError):
        return None
    return int(event.id), done


def finished_backfill(plan: BackfillPlan) -> int | None:
    """The id of the committed backfill ``plan`` repeats (None: it has work to do): the live gallery is still the
    version that backfill published, and its kept ``plan.json`` asked for the same thing — run again, it would
    re-embed the same items with the same generation into a second, identical version and record a second event.
    Reads only."""
    live = _live_backfill(plan)
    return live[0] if live is not None and plan.repeats(live[1]) else None


def plan_backfill(
    params: Params,
    ws: Workspace,
    *,
    target: int | None = None,
    fraction: float = 1.0,
    order: str | None = None,
    seed: int = 0,
    force: bool = False,
    transform: bool = False,
) -> BackfillPlan:
    """Decide what to re-embed (writes nothing; :func:`start` saves or resumes it and fixes the items).

    A partial backfill mixes the target's vectors with the live gallery's, which is only meaningful when the target's
    queries passed the compatibility criterion against it; ``force`` lets an operator override that (recorded with
    the event). ``transform``: carry the live rows through a transform bridge instead (flows/steps/transform.py).
    """
    order = order or params.backfill.order
    if order not in ORDERS:
        raise ConfigError(f"unknown backfill order {order!r}; use one of {', '.join(ORDERS)}")
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"--fraction must be in (0, 1] (got {fraction}); 1 re-embeds the whole gallery")
    if transform:
        check_fraction(fraction)
    gallery_store(params, ws.home).check()  # known, installed, reachable: before anything is embedded
    check_cluster(params)  # a scheduler that answers
    with ws.lineage(params, readonly=True) as store:
        plan = _plan(params, ws, store, target, fraction, order, seed, force)
        if transform:  # the live rows carried as they are: no ζ restart, the target's own ζ
            live = _live_backfill(plan, store)
            if live is not None and live[1].bridge is not None and live[1].target == plan.target:
                bridge = live[1].bridge  # the transform that made the live gallery: its rerun is "already done"
            else:
                bridge = plan_transform(store, plan.source_generation, plan.target, live_store(plan, plan.evaluation))
            zeta = store.generation(plan.target).zeta
            plan = plan.model_copy(update={"bridge": bridge, "restart_zeta": False, "zeta": zeta})
        return plan


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


def _galleries(
    params: Params, ws: Workspace, live: GalleryVersion, kind: str, fraction: float, order: str
) -> tuple[BackfillGallery, ...]:
    """The galleries the backfill keeps current, each with its item counts; refuses a request one cannot serve."""
    evaluation = GalleryStore(live.evaluation_gallery())
    sizes: dict[Literal["evaluation", "corpus"], int] = {"evaluation": len(evaluation)}
    corpus = open_corpus(params, ws)
    if corpus is not None:
        sizes["corpus"] = len(corpus)
        served = live.serving()
        if kind == "partial" and (not served.corpus or len(GalleryStore(served.gallery)) != len(corpus)):
            raise ConfigError(
                f"the live gallery does not serve the corpus {params.gallery.path} (yet, or it changed); run a full "
                "backfill (--fraction 1) to embed it"
            )
    if kind == "partial" and order == "uncertainty":
        first = next(evaluation.parts()).gallery
        if first.geometry != "lorentz" or first.features != "embedding":
            raise ConfigError(
                "uncertainty ordering needs Lorentz embeddings (hyperbolic uncertainty); use --order random or oldest"
            )
    out = []
    for name, total in sizes.items():
        selected = total if kind == "full" else round(fraction * total)
        if not selected:
            what = "live gallery" if name == "evaluation" else "serving corpus"
            raise ConfigError(f"--fraction {fraction} of the {what}'s {total} items selects none; raise the fraction")
        out.append(BackfillGallery(name=name, total=total, selected=selected))
    return tuple(out)


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
    if kind == "partial":
        _check_partial(store, ptr, g, force)
    galleries = _galleries(params, ws, GalleryVersion.of_index(ptr.index_path), kind, fraction, order)
    restart = bool(params.backfill.restart_zeta and kind == "full" and g.geometry == "lorentz" and g.zeta is not None)
    return BackfillPlan(
        home=str(ws.home),
        params=params,
        target=target,
        target_checkpoint=g.checkpoint_path,
        source_generation=ptr.generation_id,
        source_pointer_version=ptr.id,
        source_index=ptr.index_path,
        kind=kind,
        fraction=float(fraction),
        order=order if kind == "partial" else "all",
        seed=seed,
        chunk_size=params.backfill.chunk_size,
        throttle_s=params.backfill.throttle_seconds,
        restart_zeta=restart,
        zeta=params.geometry.zeta0 if restart else g.zeta,
        galleries=galleries,
        started_at=datetime.now(UTC).isoformat(),
        forced=bool(force and kind == "partial"),
    )


def start(plan: BackfillPlan) -> BackfillPlan:
    """Save the plan, or resume the unfinished backfill that asked for the same thing (its start time; the paths are
    this workspace's, so a backfill copied with its workspace resumes in the copy); then fix every gallery's items
    (:func:`select_items`)."""
    saved = plan.work_dir / "plan.json"
    if saved.exists():
        try:
            prev = BackfillPlan.model_validate_json(saved.read_text())
        except ValidationError:
            raise LineageError(
                f"{saved} was written by another bctflow version; delete {plan.work_dir} and start the backfill again"
            ) from None
        if not prev.same_request(plan):
            raise LineageError(
                f"another backfill (generation {prev.target}, {prev.kind}, fraction {prev.fraction}, order "
                f"{prev.order}) is unfinished in "
                f"{plan.work_dir}; rerun that command to finish it, or delete the folder to abandon it"
            )
        plan = plan.model_copy(update={"started_at": prev.started_at})
    else:
        plan.work_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(saved, plan.model_dump_json())
    for gallery in plan.galleries:
        select_items(plan, gallery)
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


def gallery_source(plan: BackfillPlan, gallery: BackfillGallery) -> GallerySource:
    """The items ``gallery`` embeds: the evaluation split, or the serving corpus of params ``gallery:``."""
    p, ws = plan.params, plan.workspace
    source = open_corpus(p, ws) if gallery.corpus else evaluation_source(p, ws)
    assert source is not None  # planned with a corpus
    return source


def live_store(plan: BackfillPlan, gallery: BackfillGallery) -> GalleryStore:
    """``gallery`` as the live version holds it now (rows stamped with the generation that embedded them)."""
    live = plan.live_version
    path = live.serving().gallery if gallery.corpus else live.evaluation_gallery()
    return GalleryStore(path, generation=plan.source_generation)


def selected_positions(plan: BackfillPlan, gallery: BackfillGallery) -> np.ndarray:
    """Sorted positions (in its source's split) of the items of ``gallery`` this backfill re-embeds: all (full), or
    the first ``selected`` in ``plan.order`` over the live gallery's own vectors (partial). Reads only."""
    split = gallery_source(plan, gallery).split
    if plan.kind == "full":
        return np.arange(len(split), dtype=np.int64)
    current = live_store(plan, gallery)
    chosen = current.column("ids")[current.backfill_order(plan.order, plan.seed)[: gallery.selected]]
    return np.sort(split.positions_of(chosen))


def select_items(plan: BackfillPlan, gallery: BackfillGallery) -> np.ndarray:
    """:func:`selected_positions`, computed once, saved in the work folder, then read back."""
    saved = plan.work_dir / "selection" / f"{gallery.name}.npy"
    if saved.exists():
        return np.load(saved)
    positions = selected_positions(plan, gallery)
    saved.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(saved) as tmp, open(tmp, "wb") as fh:
        np.save(fh, positions)
    return positions


def reembed(
    plan: BackfillPlan, on_batch: Callable[[int], None] | None = None
) -> list[tuple[BackfillGallery, Embedded]]:
    """Embed the selected items of every gallery with the target (resumable: finished parts are kept), pausing
    ``throttle_s`` after each part. Returns each gallery with what its embedding did."""
    checkpoint = gallery_model_checkpoint(plan)
    done = []
    for gallery in plan.galleries:
        out, p, pause = plan.work_version.store(gallery.corpus), plan.params, plan.throttle_s
        if plan.bridge is not None:  # a gallery transform: the live rows through the bridge, no model
            embedded = transform_gallery(
                p, live_store(plan, gallery), plan.bridge, out, on_batch=on_batch, throttle=pause
            )
        else:
            items = select_items(plan, gallery)
            embedded = embed_gallery(p, gallery_source(plan, gallery), checkpoint, out, generation=plan.target,
                                     positions=items, on_batch=on_batch, throttle=pause)  # fmt: skip
        done.append((gallery, embedded))
    return done
