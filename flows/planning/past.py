"""What a plan reads from the lineage and the workspace it describes, in one read-only session, and checks there.

* :func:`parent_ref` — the live gallery's generation and model, its checkpoint verified (sha256 pinned by the
  lineage, then its spec against the lineage record) from one read of the file;
* :func:`zeta_prev` — the ζ the next generation grows from (ζ₀'s rescaled copy after a ζ-restarting backfill);
* :func:`serving_generations` / :func:`compat_history` — what evaluation measures the new generation against;
* :func:`check_no_orphaned_workspace` / :func:`check_live_gallery` — a lineage that lost its rows, a live gallery
  that cannot serve what the lineage says;
* :func:`check_evaluation_galleries` — each gallery the new generation is measured on is the one the lineage pinned
  (revision 0006), its parts the files its ``store.json`` lists.
"""

from __future__ import annotations

from pathlib import Path

from components.errors import CheckpointMismatchError, IndexIntegrityError, LineageError
from components.evaluation import COMPAT_METRICS
from components.indexing.backend import ATTACHMENT, collection_at
from components.indexing.live import LivePointer
from components.indexing.parts import STORE_FILE, GalleryParts
from components.indexing.version import GalleryVersion
from components.models import ModelSpec
from flows.planning.plan import CompatValue, ParentRef, ServingGeneration, parent_checkpoint
from flows.runtime.workspace import Workspace
from registry.lineage import LineageDB

__all__ = [
    "check_evaluation_galleries",
    "check_live_gallery",
    "check_no_orphaned_workspace",
    "compat_history",
    "parent_ref",
    "serving_generations",
    "zeta_prev",
]


def parent_ref(store: LineageDB) -> ParentRef | None:
    """The live gallery's generation and model, from the newest live pointer (None: empty lineage), with the spec
    of its checkpoint once the file proved to be the one the lineage records."""
    ptr = store.live_pointer()
    if ptr is None:
        return None
    g = store.generation(ptr.generation_id)
    parent = ParentRef(
        pointer_id=ptr.id,
        id=g.id,
        name=g.name,
        checkpoint=ptr.model_checkpoint or g.checkpoint_path,
        evaluation_gallery=str(GalleryVersion.of_index(ptr.index_path).evaluation_gallery()),
        zeta=ptr.zeta if ptr.zeta is not None else g.zeta,
        curvature=g.curvature,
        geometry=g.geometry,
        embed_dim=g.embed_dim,
        class_order=tuple(g.class_order),
        mlflow_version=g.mlflow_version,
        checkpoint_sha256=ptr.model_sha256 if ptr.model_checkpoint else g.checkpoint_sha256,
    )
    return parent.model_copy(update={"spec": _verified_spec(parent)})


def _verified_spec(parent: ParentRef) -> ModelSpec:
    """The parent checkpoint's spec, after its bytes (sha256, when recorded) and then its spec proved to be the model
    its lineage record describes."""
    ckpt = parent_checkpoint(parent.checkpoint)
    if parent.checkpoint_sha256 is not None and ckpt.sha256 != parent.checkpoint_sha256:
        raise CheckpointMismatchError(
            f"parent generation {parent.id}'s checkpoint {ckpt.path} is not the file the lineage recorded (sha256 "
            f"{parent.checkpoint_sha256[:12]}…, the file has another content); restore the original checkpoint of "
            "that generation from a backup"
        )
    spec = ckpt.spec
    expected = {
        "geometry": parent.geometry,
        "output_dim": parent.embed_dim,
        "zeta": parent.zeta,
        "class_order": parent.class_order,
    }
    diffs = [
        f"{k}: checkpoint has {getattr(spec, k)!r}, lineage has {v!r}"
        for k, v in expected.items()
        if getattr(spec, k) != v
    ]
    if diffs:
        raise CheckpointMismatchError(
            f"parent generation {parent.id}'s checkpoint {parent.checkpoint} does not match its lineage record "
            f"({'; '.join(diffs)}); "
            "restore the original checkpoint of that generation"
        )
    return spec


def zeta_prev(store: LineageDB) -> tuple[float | None, bool]:
    """ζ the next generation grows from: the newest generation's, or ζ₀ after a ζ-restarting backfill since."""
    gens = store.generations()
    if not gens:
        return None, False
    newest = gens[-1]
    ptr = store.live_pointer()
    restart = next((b for b in reversed(store.backfills()) if b.zeta_restarted), None)
    if (
        restart is not None
        and ptr is not None
        and ptr.backfill_id == restart.id
        and restart.to_generation_id >= newest.id
    ):
        return ptr.zeta, True
    return newest.zeta, False


def serving_generations(store: LineageDB, parent: ParentRef | None, gen_id: int) -> tuple[ServingGeneration, ...]:
    """Every serving generation but the new one, each with the evaluation gallery its queries are measured on: the
    live gallery's for the parent (after a backfill, a rescaled or mixed one), its own for the others."""
    out = []
    for gid in store.serving_generation_ids():
        if gid == gen_id:
            continue
        own = parent is not None and gid == parent.id
        gallery = (
            parent.evaluation_gallery
            if own and parent is not None
            else str(GalleryVersion.of_index(store.generation(gid).index_path).evaluation_gallery())
        )
        out.append(ServingGeneration(id=gid, evaluation_gallery=gallery))
    return tuple(out)


def compat_history(store: LineageDB, ids: tuple[int, ...]) -> tuple[CompatValue, ...]:
    """The committed M(φ_t, φ_k) for serving generations t ≥ k among ``ids``, on every compatibility metric."""
    return tuple(
        CompatValue(query=t, gallery=k, metric=m, value=store.metric_value(t, k, m))
        for m in COMPAT_METRICS
        for i, t in enumerate(ids)
        for k in ids[: i + 1]
    )


def check_no_orphaned_workspace(ws: Workspace, store: LineageDB) -> None:
    """An empty lineage beside committed generation folders or a live gallery means the lineage was lost (a deleted
    or zero-byte database, a wrong lineage.db_url): training generation 0 again would re-register it in MLflow and
    take over its aliases. Refuse instead."""
    gens = sorted(p.name for p in ws.generations_dir.glob("gen_*")) if ws.generations_dir.is_dir() else []
    live = (ws.live_dir / "CURRENT").exists()
    if gens or live:
        found = ", ".join(gens[:3]) + ("…" if len(gens) > 3 else "") + (" and a live gallery" if live else "")
        raise LineageError(
            f"the lineage database {store.label} records no generation, but {ws.home} holds {found.lstrip(', ')}: the "
            "lineage is missing or was emptied. Restore it from a backup (or fix lineage.db_url); to start a new "
            "chain, use another --home"
        )


def check_live_gallery(ws: Workspace, store: LineageDB) -> None:
    """The live gallery must serve what the lineage says: CURRENT names the lineage's live index and generation, that
    index opens in the store that holds it (FAISS: manifest, sha256 of every file, structure; a database: its rows),
    and its manifest is the one the lineage pinned (revision 0005)."""
    ptr, live = store.live_pointer(), LivePointer(ws.live_dir)
    try:
        if ptr is not None and not live.matches(ptr.index_path, generation=ptr.generation_id):
            raise IndexIntegrityError(
                f"{live.pointer_path} does not name the live index the lineage records ({ptr.index_path}, generation "
                f"{ptr.generation_id}); run `bctflow doctor --repair` to rewrite it from the lineage"
            )
        live.index()
        index_dir = Path(ptr.index_path) if ptr is not None else None
        if (
            ptr is not None
            and index_dir is not None
            and ptr.index_sha256
            and (collection_at(index_dir).digest() != ptr.index_sha256)
        ):
            raise IndexIntegrityError(
                f"{index_dir / ATTACHMENT} is not the manifest the lineage pinned when generation "
                f"{ptr.generation_id}'s gallery went live (sha256 {ptr.index_sha256[:12]}…): the index was replaced or "
                "edited; restore that folder from a backup, or rebuild the gallery with `bctflow backfill`"
            )
    except IndexIntegrityError as err:
        raise IndexIntegrityError(f"the live gallery cannot serve: {err}") from None


def check_evaluation_galleries(
    store: LineageDB, parent: ParentRef | None, serving: tuple[ServingGeneration, ...]
) -> None:
    """Each evaluation gallery the new generation is measured on (``serving``) is the one the lineage pinned — the
    live version's by its pointer row (the parent's), the others' by their generation rows; rows written before
    revision 0006 pin none — and its parts are the files its ``store.json`` lists (sha256). IndexIntegrityError
    naming the file and the fix otherwise."""
    ptr = store.live_pointer()
    for s in serving:
        live = parent is not None and ptr is not None and s.id == parent.id
        pin = ptr.gallery_sha256 if live and ptr is not None else store.generation(s.id).gallery_sha256
        gallery = GalleryParts(Path(s.evaluation_gallery))
        if pin is not None and gallery.digest() != pin:
            pinned = gallery.path if gallery.legacy else gallery.path / STORE_FILE
            raise IndexIntegrityError(
                f"{pinned} is not the one the lineage pinned for generation {s.id}'s evaluation gallery (sha256 "
                f"{pin[:12]}…, the file has another content): the gallery was replaced or edited; restore "
                f"{gallery.path.parent} from a backup"
                + (", or rebuild the live gallery with `bctflow backfill`" if live else "")
            )
        gallery.verify()
