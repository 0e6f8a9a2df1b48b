"""Step 1 of a backfill: its plan made from a request, then started or resumed (docs/design.md §7.6).

:func:`plan_backfill` fixes the target, kind, fraction, order and the galleries with their item counts, writing
nothing; :func:`finished_backfill` says when it repeats the backfill that made the live gallery; :func:`start`
(under the workspace lock) saves it as ``plan.json`` or resumes the unfinished backfill that asked for the same
thing (a different request is refused), and fixes each gallery's items once
(:func:`flows.backfill.reembedding.select_items`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ValidationError

from components.errors import ConfigError, LineageError
from components.geometry import create_space
from components.indexing.mixed import ORDERS
from components.indexing.reader import PartReader
from components.indexing.version import GalleryVersion
from components.io import atomic_write_text
from flows.backfill.plan import BackfillGallery, BackfillPlan
from flows.backfill.reembedding import live_store, select_items
from flows.backfill.task_runner import check_cluster
from flows.backfill.transform import check_fraction, plan_transform
from flows.gallery.data import open_corpus
from flows.params import Params
from flows.params.specs import gallery_store
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB
from registry.orm import GalleryPointer, Generation

__all__ = ["BackfillRequest", "finished_backfill", "ingest_plan", "new_corpus_items", "plan_backfill", "start"]


def _live_backfill(plan: BackfillPlan, store: LineageDB | None = None) -> tuple[int, BackfillPlan] | None:
    """(id, kept plan) of the committed backfill that published the live gallery ``plan`` replaces; None: the live
    gallery is a generation's own, or its backfill's record or work folder is gone (or an older bctflow wrote it).
    ``store``: an open lineage session to read it through (else one is opened for the call)."""
    with plan.workspace.session(plan.params, store, readonly=True) as lineage:
        event = next((e for e in lineage.backfills() if Path(e.index_path) == Path(plan.source_index)), None)
    if event is None:
        return None
    try:
        saved = plan.workspace.finished_backfill_dir(event.id) / "plan.json"
        done = BackfillPlan.model_validate_json(saved.read_text())
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


@dataclass(frozen=True)
class BackfillRequest:
    """What ``bctflow backfill`` asks for, as :func:`plan_backfill` takes it (its keyword arguments, which say what
    each one means): one object for the command's plan and its capacity plan (``--plan --items N``)."""

    target: int | None = None
    fraction: float = 1.0
    order: str | None = None
    seed: int = 0
    force: bool = False
    transform: bool = False
    ingest: bool = False

    def plan(self, params: Params, ws: Workspace) -> BackfillPlan:
        """:func:`plan_backfill` of this request."""
        return plan_backfill(params, ws, **asdict(self))


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
    ingest: bool = False,
    top_up: bool = False,
) -> BackfillPlan:
    """Decide what to re-embed (writes nothing; :func:`start` saves or resumes it and fixes the items).

    A partial backfill mixes the target's vectors with the live gallery's, which is only meaningful when the target's
    queries passed the compatibility criterion against it; ``force`` lets an operator override that (recorded with
    the event). ``transform``: carry the live rows through a transform bridge instead (flows/backfill/transform.py).
    ``ingest``: embed the serving corpus's new items (those the live gallery does not hold) with the live gallery's
    own model and add them — what production does as items arrive (:func:`ingest_plan`). ``top_up``: a partial
    backfill leaves ``fraction`` of the gallery embedded by the target, not embedding again what it embeds already.
    """
    if ingest:
        gallery_store(params, ws.home).check()
        with ws.lineage(params, readonly=True) as store:
            return ingest_plan(params, ws, store, seed)
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
        plan = _plan(params, ws, store, target, fraction, order, seed, force, top_up)
        if transform:  # the live rows carried as they are: no ζ restart, the target's own ζ
            live = _live_backfill(plan, store)
            if live is not None and live[1].bridge is not None and live[1].target == plan.target:
                bridge = live[1].bridge  # the transform that made the live gallery: its rerun is "already done"
            else:
                bridge = plan_transform(store, plan.source_generation, plan.target, live_store(plan, plan.evaluation))
            zeta = store.generation(plan.target).zeta
            plan = plan.model_copy(update={"bridge": bridge, "restart_zeta": False, "zeta": zeta})
        return plan


def new_corpus_items(params: Params, ws: Workspace, live: GalleryVersion) -> tuple[int, int]:
    """(items of the serving corpus the live version does not hold, the corpus's items); ConfigError in one line
    when the live gallery serves the evaluation split (there is no corpus to ingest from)."""
    corpus = open_corpus(params, ws)
    if corpus is None:
        raise ConfigError(
            "the live gallery serves the evaluation split (gallery.source eval_split): there is no corpus to ingest; "
            "set gallery.source and gallery.path"
        )
    served = live.serving()
    held = PartReader(served.gallery).rows.ids if served.corpus else np.zeros(0, dtype=np.int64)
    return int((~np.isin(corpus.split.ids, held)).sum()), len(corpus)


def ingest_plan(params: Params, ws: Workspace, store: LineageDB, seed: int = 0) -> BackfillPlan:
    """An ingest: the corpus's new items embedded by the live gallery's own model (the pointer's checkpoint, ζ and
    stamp) and added to a new gallery version that accepts the same queries; the evaluation gallery is carried as it
    is. ConfigError in one line when the corpus holds nothing new."""
    ptr = store.live_pointer()
    if ptr is None:
        raise LineageError("there is no live gallery yet; create generation 0 first (bctflow run)")
    live = GalleryVersion.of_index(ptr.index_path)
    new, total = new_corpus_items(params, ws, live)
    if not new:
        raise ConfigError(f"the live gallery holds every one of the corpus's {total} items; nothing to ingest")
    g = store.generation(ptr.generation_id)
    evaluation = BackfillGallery(name="evaluation", total=len(PartReader(live.evaluation_gallery())), selected=0)
    return BackfillPlan(
        home=str(ws.home),
        params=params,
        target=g.id,
        target_checkpoint=ptr.model_checkpoint or g.checkpoint_path,
        source_generation=ptr.generation_id,
        source_pointer_version=ptr.id,
        source_index=ptr.index_path,
        kind="ingest",
        fraction=new / total,
        order="new",
        seed=seed,
        chunk_size=params.backfill.chunk_size,
        throttle_s=params.backfill.throttle_seconds,
        restart_zeta=False,
        zeta=ptr.zeta if ptr.zeta is not None else g.zeta,
        galleries=(evaluation, BackfillGallery(name="corpus", total=total, selected=new)),
        started_at=datetime.now(UTC).isoformat(),
        compatible=tuple(ptr.compatible_generations or [ptr.generation_id]),
    )


def _check_partial(store: LineageDB, ptr: GalleryPointer, g: Generation, force: bool) -> None:
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
    params: Params, ws: Workspace, live: GalleryVersion, kind: str, fraction: float, order: str, top_up: int | None
) -> tuple[BackfillGallery, ...]:
    """The galleries the backfill keeps current, each with its item counts; refuses a request one cannot serve."""
    evaluation = PartReader(live.evaluation_gallery())
    sizes: dict[Literal["evaluation", "corpus"], int] = {"evaluation": len(evaluation)}
    held = {"evaluation": evaluation}  # each gallery as the live version holds it (the corpus: read for a partial)
    corpus = open_corpus(params, ws)
    if corpus is not None:
        sizes["corpus"] = len(corpus)
        served = live.serving()
        if served.corpus and kind == "partial":
            held["corpus"] = PartReader(served.gallery)
        if kind == "partial" and ("corpus" not in held or len(held["corpus"]) != len(corpus)):
            raise ConfigError(
                f"the live gallery does not serve the corpus {params.gallery.path} (yet, or it changed); run a full "
                "backfill (--fraction 1) to embed it"
            )
    ordered = kind == "partial" and order == "uncertainty"  # no uncertainty to order by outside Lorentz galleries
    if ordered and not evaluation.first().retrieval_space.radius_encodes_confidence:
        raise ConfigError(
            "uncertainty ordering needs Lorentz embeddings (hyperbolic uncertainty); use --order random or oldest"
        )
    out = []
    for name, total in sizes.items():
        # topping up (``top_up``: the target) leaves ``fraction`` of the gallery embedded by the target: items it
        # embeds already (an earlier partial backfill with it, continued) are not embedded again
        have = 0 if top_up is None else int(held[name].rows.stamped(top_up).sum())
        selected = total if kind == "full" else max(0, round(fraction * total) - have)
        if not selected:
            what = "live gallery" if name == "evaluation" else "serving corpus"
            raise ConfigError(f"--fraction {fraction} of the {what}'s {total} items selects none; raise the fraction")
        out.append(BackfillGallery(name=name, total=total, selected=selected))
    return tuple(out)


def _plan(
    params: Params,
    ws: Workspace,
    store: LineageDB,
    target: int | None,
    fraction: float,
    order: str,
    seed: int,
    force: bool,
    top_up: bool = False,
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
    top_up = top_up and kind == "partial"
    galleries = _galleries(params, ws, GalleryVersion.of_index(ptr.index_path), kind, fraction, order,
                           target if top_up else None)  # fmt: skip
    clipped = create_space(g.geometry).radius_encodes_confidence  # a clip radius ζ a full backfill may restart
    restart = bool(params.backfill.restart_zeta and kind == "full" and clipped and g.zeta is not None)
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
        top_up=top_up,
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
